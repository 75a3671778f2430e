"""Schema evolution: declared component migrations, never guessed.

A component whose schema changes gets a new fingerprint, and a world saved under the old one
holds values no loaded class decodes. A migration says exactly what to do with them: the old
`(name, fingerprint)`, the class its values become, and a pure function from the old field data
to the new. Loading a world (commands/host.py) applies every declared migration the world needs
in declaration order, to its published entities and to its open commands' payloads, and the
ledger records each one with an outbox event; with none declared, the load error says what to
declare (`ComponentMigrationRequiredError`). docs/guide/schema-evolution.md is the how-to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from archetype.canonical import canonical_json
from archetype.world.component_schema import REF_KEYS, VALUE_KEYS
from archetype.world.components import FINGERPRINT_PATTERN, Component, component_data
from archetype.world.error_text import error_text

_FINGERPRINT = re.compile(FINGERPRINT_PATTERN)


class ComponentMigrationRequiredError(LookupError):
    """A world holds component values of a schema no loaded class has and no declared migration
    moves; the message names the type, both fingerprints and the declaration to add."""


class ComponentMigrationError(ValueError):
    """A declared migration failed on a value: the function raised, or its result does not
    validate as the target class. Nothing was rewritten."""


@dataclass(frozen=True)
class ComponentMigration:
    name: str
    from_fingerprint: str
    to: type[Component]
    migrate: Callable[[dict[str, Any]], dict[str, Any]]

    def __post_init__(self) -> None:
        if not _FINGERPRINT.fullmatch(self.from_fingerprint):
            raise ValueError(f"from_fingerprint must be 64 lower-case hex digits, not {self.from_fingerprint!r}")
        if not (isinstance(self.to, type) and issubclass(self.to, Component)):
            raise TypeError(f"{self.to!r} is not a Component subclass")
        if self.to.component_fingerprint() == self.from_fingerprint:
            raise ValueError(
                f"{self.to.__qualname__} already has fingerprint {self.from_fingerprint}: nothing to migrate"
            )
        if not callable(self.migrate):
            raise TypeError("migrate is a function from the old field data (a dict) to the new")

    @property
    def to_fingerprint(self) -> str:
        return self.to.component_fingerprint()

    def value(self, data: dict[str, Any], where: str) -> dict[str, Any]:
        """The new wire value of one old value's data: the function's result built live as the
        target class (its validation and defaults run) and written back canonical."""
        try:
            migrated = self.migrate(json.loads(json.dumps(data)))  # a private copy: the function cannot alter the input
            live = self.to.model_validate(migrated)
            new = component_data(live)
        except Exception as exc:
            raise ComponentMigrationError(
                f"{where}: migrating {self.name} {self.from_fingerprint[:12]}... to {self.to.__qualname__} failed: "
                f"{error_text(exc)}"
            ) from exc
        return {"data": new, "fingerprint": self.to_fingerprint, "name": self.to.__name__}

    def rewrite(self, document: Any, where: str) -> Any:
        """`document` (a payload, an entity's component list) with every value and type reference
        of the old identity moved to the new one; everything else as it was."""
        if isinstance(document, dict):
            keys = document.keys()
            if keys == VALUE_KEYS or keys == REF_KEYS:
                if (document["name"], document["fingerprint"]) != (self.name, self.from_fingerprint):
                    return document
                if keys == REF_KEYS:
                    return {"fingerprint": self.to_fingerprint, "name": self.to.__name__}
                return self.value(document["data"], where)
            return {key: self.rewrite(item, where) for key, item in document.items()}
        if isinstance(document, list):
            return [self.rewrite(item, where) for item in document]
        return document

    def rewrite_text(self, text: str, where: str) -> str:
        return canonical_json(self.rewrite(json.loads(text), where))

    def rewrite_entity(self, text: str, where: str) -> str:
        """An entity's component list, migrated and in the order the world stores it (by key)."""
        values = self.rewrite(json.loads(text), where)
        keys = [f"{v['name']}:{v['fingerprint']}" for v in values]
        if len(set(keys)) != len(keys):
            raise ComponentMigrationError(
                f"{where}: the migrated {self.to.__name__} collides with a component it already has"
            )
        return canonical_json(sorted(values, key=lambda v: f"{v['name']}:{v['fingerprint']}"))


class ComponentMigrations:
    """The migrations a runtime declares (`runtime.worlds.migrations`), in declaration order."""

    def __init__(self) -> None:
        self._declared: dict[str, ComponentMigration] = {}

    def declare(self, name: str, from_fingerprint: str, to: type[Component],
                migrate: Callable[[dict[str, Any]], dict[str, Any]]) -> ComponentMigration:  # fmt: skip
        """Values of component `name` with `from_fingerprint` become `to` instances built from
        `migrate(old_data)`. One migration per old fingerprint; chains (v1 -> v2 -> v3) are
        declared step by step, in order."""
        migration = ComponentMigration(name, from_fingerprint, to, migrate)
        if from_fingerprint in self._declared:
            raise ValueError(f"a migration of {name} {from_fingerprint} is already declared")
        self._declared[from_fingerprint] = migration
        return migration

    def all(self) -> list[ComponentMigration]:
        return list(self._declared.values())

    def get(self, fingerprint: str) -> ComponentMigration | None:
        return self._declared.get(fingerprint)


def required_error(
    world_id: str, name: str, fingerprint: str, entities: int, loaded: list[type[Component]]
) -> ComponentMigrationRequiredError:
    """The load error for values of an unknown schema: what exactly to declare."""
    function = f"{name.lower()}_from_{fingerprint[:8]}"
    if loaded:
        target = loaded[0]
        now = ", ".join(sorted({cls.component_fingerprint() for cls in loaded}))
        have = f"the loaded {name} has fingerprint {now}"
        fields = ", ".join(f'"{field}": ...' for field in target.model_fields)
        body = f"return {{**data, {fields}}}  # the old field values -> {target.__qualname__}'s fields"
        to = target.__qualname__
    else:
        have = f"no class named {name} is loaded"
        body = "return dict(data)  # the old field values -> the new class's fields"
        to = name
    return ComponentMigrationRequiredError(
        f"world {world_id!r} holds component {name!r} with fingerprint {fingerprint} ({entities} entities), "
        f"and no loaded class has that schema; {have}. Declare how its values migrate before the world loads:\n\n"
        f"    def {function}(data: dict) -> dict:\n"
        f"        {body}\n\n"
        f'    runtime.worlds.migrations.declare("{name}", "{fingerprint}", {to}, {function})\n\n'
        "(docs/guide/schema-evolution.md)"
    )
