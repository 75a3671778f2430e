"""The component check of admission: every component a command's payload names is one its world
recorded, not superseded by a migration, and each value's data fits the recorded schema. The
ledger runs it in the admitting transaction on every authority (and on a fork's copies of open
commands); the scheduler runs it before a spawn reserves its entity id, against the schemas it
read, so a spawn the ledger would refuse reserves nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from archetype.commands.errors import InvalidComponentDataError, UnknownComponentError
from archetype.world.component_schema import SchemaMismatchError, data_validator, occurrences, render

# fingerprint -> its schema's compiled check: content-addressed (the fingerprint is the schema's
# digest), so one compilation serves every world and can never go stale.
_VALIDATORS: dict[str, Callable[[Any, Any], None]] = {}


def check_components(world_id: str, documents: list[tuple[str, str]],
                     find: Callable[[list[str]], Sequence[Sequence[Any]]]) -> None:  # fmt: skip
    """Every component value and type in these JSON documents (each labelled for the message) is
    one the world recorded and no migration superseded, and each value's data fits its schema:
    the check every authority runs at admission, without the Python classes. `find` answers the
    recorded rows (FIND_COMPONENTS' columns) among a list of fingerprints."""
    found: Found = [(label, occurrences(json.loads(text))) for label, text in documents]
    named = {occurrence[2] for _, each in found for occurrence in each}
    if named:
        check_found(world_id, found, {r[1]: r for r in find(sorted(named))})


# Each document's label and the component occurrences found in it (`occurrences`)
Found = list[tuple[Any, list[tuple[Any, str, str, Any]]]]


def check_found(world_id: str, found: Found, known: Mapping[str, Sequence[Any]],
                label: Callable[[Any], str] = str) -> None:  # fmt: skip
    """`check_components` of occurrences already found, against the recorded rows among their
    fingerprints, keyed by fingerprint. `label` makes a document's label into the text a refusal
    names it by (admission's is made only for a refusal: one repr per command otherwise)."""
    for labelled, each in found:
        for where, name, fingerprint, data in each:
            record = known.get(fingerprint)
            if record is None or record[0] != name:
                raise UnknownComponentError(
                    f"{render(where)}: world {world_id!r} has recorded no component {name!r} with fingerprint "
                    f"{fingerprint} ({label(labelled)}; GET /worlds/{{id}}/components lists the recorded ones)"
                )
            if record[4] is not None:
                raise UnknownComponentError(
                    f"{render(where)}: component {name!r} {fingerprint} was migrated to {record[4]} ({label(labelled)})"
                )
            if data is not None:
                validate = _VALIDATORS.get(fingerprint)
                if validate is None:
                    validate = _VALIDATORS.setdefault(fingerprint, data_validator(json.loads(record[2])))
                try:
                    validate(data, (where, "data"))
                except SchemaMismatchError as exc:
                    raise InvalidComponentDataError(f"{exc} ({name} {fingerprint[:12]}, {label(labelled)})") from None
