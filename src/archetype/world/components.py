"""Components and their portable identity.

A component type is identified on the wire by its class name plus the SHA-256 fingerprint of its
canonical *prefixed* schema: the pydantic JSON Schema with documentation keys removed and every
field name prefixed with the lower-cased class name and `__`. The module a class lives in is not
part of it, so schema-identical definitions survive module moves; a same-named class with another
schema has another fingerprint and is never guessed.

A directly constructed `ComponentTypeRef`/`ComponentValue` also keeps an immutable, non-wire
*affinity* to the caller's exact class, so direct mutations keep using that live class even when
several schema-identical classes are loaded. Decoding from the wire ignores affinity by design.

Component data is canonical JSON (docs/components.md, "Canonical values") both on the wire and as
the live value a class builds from it: `component_data` is the one canonical form of a live
component, and `live_component` the one way a wire value becomes a live one (admission checks
with it, materialization builds with it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import repeat
from math import isfinite
from operator import eq, is_, itemgetter
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from archetype.canonical import NonCanonicalValueError, canonical_text, check_canonical, digest, path_step
from archetype.world.error_text import type_name

COMPONENT_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
FINGERPRINT_PATTERN = r"^[0-9a-f]{64}$"
DOC_KEYS = frozenset({"title", "description", "examples"})
"""Dropped from a schema at every depth before it is fingerprinted (docs/components.md)."""

MAX_DATA_DEPTH = 32
"""The deepest nesting of component data, the data object itself counting as one level. It
leaves room for every envelope data travels in (a payload, a write-set, a request body), all of
which stay within `archetype.canonical.MAX_DEPTH`."""

NON_CANONICAL_ERROR = NonCanonicalValueError.code
"""The pydantic error type (and the error code) of a value without a canonical form."""

ADMISSION_CONTEXT_KEY = "archetype"
"""Admission builds each live component with the validation context `{"archetype": "admission"}`,
so a validator that must not do something at admission (reach a service, count calls) can tell."""


def admission_context() -> dict[str, str]:
    return {ADMISSION_CONTEXT_KEY: "admission"}


def non_canonical(exc: NonCanonicalValueError) -> PydanticCustomError:
    """A canonical-form refusal as a pydantic error, so that validation reports it with its type."""
    return PydanticCustomError(NON_CANONICAL_ERROR, "{path}: {reason}", {"path": exc.path, "reason": exc.reason})


def non_canonical_refusal(errors: Sequence[ErrorDetails], *, root: str = "$", skip: int = 0) -> NonCanonicalValueError | None:
    """The first `non_canonical_value` error among pydantic `errors`, as a NonCanonicalValueError
    whose path runs from `root` through the error's location (less its first `skip` steps) into
    the refused value; None when there is none."""
    for error in errors:
        if error.get("type") != NON_CANONICAL_ERROR:
            continue
        context = error.get("ctx") or {}
        inner = str(context.get("path", "$"))
        path = root + "".join(path_step(step) for step in tuple(error.get("loc", ()))[skip:]) + inner[1:]
        reason = str(context.get("reason", error.get("msg", "")))
        return NonCanonicalValueError(f"{path}: {reason}", path=path, reason=reason)
    return None

LiveValue = tuple[int, str, "type[Component] | None", dict[str, Any]]
"""A component value of an operation to build live: its index in the operation, class name, class
(None when none is loaded here) and data."""

# (name, fingerprint) -> loaded classes in load order; the first one answers wire decoding.
_LOADED: dict[tuple[str, str], list[type[Component]]] = {}


def _strip_docs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_docs(v) for k, v in node.items() if k not in DOC_KEYS}
    if isinstance(node, list):
        return [_strip_docs(v) for v in node]
    return node


def canonical_prefixed_schema(cls: type[BaseModel]) -> dict[str, Any]:
    schema = _strip_docs(cls.model_json_schema(mode="validation"))
    prefix = cls.__name__.lower() + "__"
    return {
        "component": cls.__name__,
        "properties": {prefix + name: spec for name, spec in schema.get("properties", {}).items()},
        "required": sorted(prefix + name for name in schema.get("required", [])),
        "defs": schema.get("$defs", {}),
    }


class Component(BaseModel):
    """Subclass this to define a component. Instances are immutable: replace them, don't mutate.

    Floats are finite (`allow_inf_nan=False`): a component is persisted, and NaN and infinities
    have no canonical JSON. Serialization keeps a non-finite float that slipped in anyway (through
    `model_construct`, `model_copy(update=...)` or an untyped field) as a float, instead of pydantic's
    default silent `null`, so `component_data` can refuse it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, ser_json_inf_nan="constants")

    __component_fingerprint__: ClassVar[str] = ""
    # derived once per class, read on every mutation and every encoding: see `type_key`, `component_text`
    __component_key__: ClassVar[str] = ""
    __component_wire_suffix__: ClassVar[str] = ""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.model_config.get("ser_json_inf_nan") != "constants":
            raise TypeError(
                f"component {cls.__qualname__} sets ser_json_inf_nan={cls.model_config.get('ser_json_inf_nan')!r}: "
                "components must keep the default 'constants', so a non-finite float is refused, never stored as null"
            )
        cls.__component_fingerprint__ = digest(canonical_prefixed_schema(cls))
        cls.__component_key__ = f"{cls.__name__}:{cls.__component_fingerprint__}"
        # the keys after "data" in a ComponentValue's canonical JSON (sorted: data, fingerprint, name);
        # the name matches COMPONENT_NAME_PATTERN as a class name, and both are ASCII: nothing to escape
        cls.__component_wire_suffix__ = f',"fingerprint":"{cls.__component_fingerprint__}","name":"{cls.__name__}"}}'
        _LOADED.setdefault((cls.__name__, cls.__component_fingerprint__), []).append(cls)

    @classmethod
    def component_fingerprint(cls) -> str:
        return cls.__component_fingerprint__


def component_data(component: Component) -> dict[str, Any]:
    """The canonical field JSON of a live component; NonCanonicalValueError when it has none
    (a non-finite float, an integer outside +/-(2**53-1), a lone surrogate, nesting deeper than
    MAX_DATA_DEPTH, a value pydantic cannot serialize)."""
    try:
        data = component.model_dump(mode="json")
    except (ValueError, TypeError, RecursionError) as exc:  # pydantic's own depth limit, a failing serializer
        reason = f"{type(component).__name__} has no JSON form ({type_name(exc)})"
        raise NonCanonicalValueError(f"$: {reason}", reason=reason) from None
    check_canonical(data, max_depth=MAX_DATA_DEPTH)
    return data


_FLOATS_ONLY: dict[type[Component], bool] = {}


def _floats_only(cls: type[Component]) -> bool:
    """Whether every field is a plain `float` (no serializer): its JSON form is then its floats,
    and the encoder's own refusal of NaN and infinities is the whole canonical check."""
    known = _FLOATS_ONLY.get(cls)
    if known is None:
        decorators = cls.__pydantic_decorators__
        known = _FLOATS_ONLY[cls] = bool(cls.model_fields) and all(
            info.annotation is float for info in cls.model_fields.values()
        ) and not (decorators.field_serializers or decorators.model_serializers or cls.model_computed_fields)
    return known


_INERT: dict[type[Component], bool] = {}
_INERT_TYPES = (int, float, str, bool)


def inert(cls: type[Component]) -> bool:
    """Whether validating `cls` runs no code but pydantic's: every field a plain `int`, `float`,
    `str` or `bool` with no constraint and no default factory, no validator anywhere (field,
    model), no `model_post_init` and no `model_validate` of its own. pydantic never changes what
    it validates, so such a class may be given a caller's own data."""
    known = _INERT.get(cls)
    if known is None:
        decorators = cls.__pydantic_decorators__
        known = _INERT[cls] = (
            all(
                info.annotation in _INERT_TYPES and not info.metadata and info.default_factory is None
                for info in cls.model_fields.values()
            )
            and not (decorators.validators or decorators.field_validators or decorators.root_validators or decorators.model_validators)
            and cls.model_post_init is BaseModel.model_post_init
            and cls.model_validate.__func__ is BaseModel.model_validate.__func__  # type: ignore[attr-defined]
        )  # fmt: skip
    return known


def canonical_by_validation(cls: type[Component]) -> bool:
    """Whether every instance `model_validate` makes of `cls` is canonical, provably, so that
    `live_from_data` need not dump it to check: an `inert` class of plain `float` fields only
    (`_floats_only`: no serializer either) with finite floats enforced (`allow_inf_nan=False`,
    Component's default). Validation then leaves a finite float in every field (it refuses NaN
    and infinities, and an input beyond the double range), and such a value dumps to those
    floats; a default is canonical too (the class's fingerprint refuses it otherwise, as it is
    part of the schema)."""
    return inert(cls) and _floats_only(cls) and cls.model_config.get("allow_inf_nan") is False


def exactly_typed(data: Any, fields: dict[str, type]) -> bool:
    """Whether `data` is a `dict` of exactly `fields`' names, each value of exactly its field's
    type (`str`, `int`, `float` or `bool`; no subclass): an input whose every field pydantic's
    validation, lax or strict, keeps as it is, so that a caller may skip it where nothing else
    (a constraint, an alias, a validator) would run. tests/world/test_exactly_typed.py holds it to
    pydantic's verdicts; test_live_values.py and tests/commands/test_answers.py its two users."""
    if type(data) is not dict or data.keys() != fields.keys():
        return False
    for name, kind in fields.items():
        if type(data[name]) is not kind:
            return False
    return True


# class -> its fields (each `float`) and its values' canonical text as a %-template, or None:
# validation of the class is not known without running it (`validates_as_given`)
_FLOAT_FIELDS: dict[type[Component], tuple[dict[str, type], str] | None] = {}
_POSITIONAL: dict[str, str] = {}  # such a template -> the same with its fields positional (`texts_as_given`)


def _as_given_template(cls: type[Component]) -> tuple[dict[str, type], str] | None:
    own_schema = cls.__get_pydantic_core_schema__.__func__ is BaseModel.__get_pydantic_core_schema__.__func__  # type: ignore[attr-defined]
    names = list(cls.model_fields)
    plain = own_schema and canonical_by_validation(cls) and all(
        info.alias is None and info.validation_alias is None for info in cls.model_fields.values()
    ) and all(name.isidentifier() for name in names)  # (a name in "%(name)r": no ")" in it)  # fmt: skip
    if not plain:
        return None
    # `%r` of an exact float is `float.__repr__`, what the canonical encoder writes for one; the
    # keys sorted and written by it
    data = ",".join(canonical_text(name) + f":%({name})r" for name in sorted(names))
    return dict.fromkeys(names, float), '{"data":{' + data + "}" + cls.__component_wire_suffix__.replace("%", "%%")


def _positional(template: str) -> str:
    """A %-template's named fields made positional, in the order they are written (sorted)."""
    return re.sub(r"%\([A-Za-z_][A-Za-z0-9_]*\)r", "%r", template)


def _template(cls: type[Component]) -> tuple[dict[str, type], str] | None:
    if cls not in _FLOAT_FIELDS:
        _FLOAT_FIELDS[cls] = _as_given_template(cls)
    return _FLOAT_FIELDS[cls]


def all_exactly(values: Any, kind: type) -> bool:
    """Whether every one of `values` is exactly of type `kind` (no subclass), asked in C: no
    value's own code (an `__eq__`, a `__hash__`) runs."""
    return all(map(is_, map(type, values), repeat(kind)))


def texts_as_given(cls: type[Component], datas: list[Any]) -> list[str] | None:
    """`text_as_given(cls, data)` of each of `datas`, asked column by column (each field's values
    at once, in C) when it answers a text for every one of them; None otherwise (the caller asks
    value by value). tests/world/test_payload_encoder.py holds it to `text_as_given`."""
    known = _template(cls)
    if known is None or not all_exactly(datas, dict):
        return None
    fields, template = known
    if not all(map(eq, map(dict.keys, datas), repeat(fields.keys()))):
        return None
    columns = []
    for name in sorted(fields):  # (the template's order)
        column = list(map(itemgetter(name), datas))
        if not all_exactly(column, float) or not all(map(isfinite, column)):
            return None
        columns.append(column)
    if template not in _POSITIONAL:
        _POSITIONAL[template] = _positional(template)
    return list(map(_POSITIONAL[template].__mod__, zip(*columns, strict=True)))


def text_as_given(cls: type[Component], data: Any) -> str | None:
    """The canonical JSON of the component value of `cls` with `data` (`{"data":...,
    "fingerprint":...,"name":...}`, what `canonical_text` of its dump gives) when `cls.model_validate(data)`
    surely accepts `data` and makes a canonical value, found without building it: `cls` is
    `canonical_by_validation`, its fields have no alias and its core schema is pydantic's own, and
    `data` is `exactly_typed` as its fields, each an exact float and finite (which pydantic takes
    as it is, whatever its config). None says nothing: the caller validates.
    tests/world/test_live_values.py holds it to pydantic's verdicts and the canonical encoder's text."""
    known = _FLOAT_FIELDS[cls] if cls in _FLOAT_FIELDS else _template(cls)
    if known is None or not exactly_typed(data, known[0]):
        return None
    for value in data.values():
        if not isfinite(value):
            return None
    return known[1] % data


def validates_as_given(cls: type[Component], data: Any) -> bool:
    """Whether `text_as_given` knows `cls`'s verdict on `data` (an acceptance) without validating."""
    return text_as_given(cls, data) is not None


def component_text(component: Component) -> str:
    """The canonical JSON of `ComponentValue.from_component(component)`, byte for byte, written
    directly: `{"data":<canonical field JSON>,"fingerprint":"<hex>","name":"<class>"}`. This is what
    a write-set encodes per component, so it builds no wire model; NonCanonicalValueError as
    `component_data`."""
    cls = type(component)
    if _floats_only(cls):
        try:
            data = component.model_dump(mode="json")
            if all(type(value) is float for value in data.values()):
                return '{"data":' + canonical_text(data) + cls.__component_wire_suffix__
        except ValueError:
            pass  # a non-finite float: component_data below says so, with its path
    return '{"data":' + canonical_text(component_data(component)) + cls.__component_wire_suffix__


def loaded_class(name: str, fingerprint: str) -> type[Component] | None:
    """The loaded class for a wire identity, None when none matches exactly."""
    classes = _LOADED.get((name, fingerprint))
    return classes[0] if classes else None


def resolve_component_class(name: str, fingerprint: str) -> type[Component]:
    """The loaded class for a wire identity; LookupError when none matches exactly."""
    classes = _LOADED.get((name, fingerprint))
    if not classes:
        same_name = any(key[0] == name for key in _LOADED)
        hint = " (a class of that name is loaded with another schema)" if same_name else ""
        raise LookupError(f"no loaded component {name!r} with fingerprint {fingerprint[:12]}...{hint}")
    return classes[0]


def loaded_components() -> dict[tuple[str, str], list[type[Component]]]:
    """Every loaded component class by wire identity (name, fingerprint), in load order."""
    return {key: list(classes) for key, classes in _LOADED.items()}


class _AffineWireModel(BaseModel):
    """A frozen wire model that may also carry an affinity to one exact component class."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    name: str = Field(pattern=COMPONENT_NAME_PATTERN)
    fingerprint: str = Field(pattern=FINGERPRINT_PATTERN)
    _affinity: type[Component] | None = PrivateAttr(default=None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"{type(self).__name__} is immutable")

    # Equality is wire equality: the affinity is not part of what a value or reference is.
    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self), self.name, self.fingerprint))

    @property
    def affinity(self) -> type[Component] | None:
        # The dict itself, as pydantic's private-attribute lookup is slow; typed Optional, it is never
        # None on a model that declares private attributes.
        return self.__pydantic_private__.get("_affinity")  # type: ignore[union-attr]

    @property
    def key(self) -> str:
        """The identity the world stores components under: name and fingerprint."""
        return f"{self.name}:{self.fingerprint}"

    def resolve(self) -> type[Component]:
        """The class to build live values with: the affinity, else the wire identity."""
        return self.affinity or resolve_component_class(self.name, self.fingerprint)

    def _bind(self, cls: type[Component]) -> None:
        self.__pydantic_private__["_affinity"] = cls  # type: ignore[index]  # never None here: see `affinity`


def type_key(cls: type[Component]) -> str:
    return cls.__component_key__


class ComponentTypeRef(_AffineWireModel):
    @classmethod
    def from_type(cls, component_type: type[Component]) -> ComponentTypeRef:
        if not (isinstance(component_type, type) and issubclass(component_type, Component)):
            raise TypeError(f"{component_type!r} is not a Component subclass")
        ref = cls(name=component_type.__name__, fingerprint=component_type.component_fingerprint())
        ref._bind(component_type)
        return ref


class ComponentValue(_AffineWireModel):
    """A component on the wire: its identity and its field JSON, which must be canonical (validation
    refuses anything else with the error type `non_canonical_value`)."""

    data: dict[str, Any]

    @field_validator("data")
    @classmethod
    def _canonical_data(cls, data: dict[str, Any]) -> dict[str, Any]:
        try:
            check_canonical(data, max_depth=MAX_DATA_DEPTH)
        except NonCanonicalValueError as exc:
            raise non_canonical(exc) from None
        return data

    @classmethod
    def from_component(cls, component: Component) -> ComponentValue:
        """The wire value of a live component; NonCanonicalValueError when its data has no canonical form."""
        if not isinstance(component, Component):
            raise TypeError(f"{component!r} is not a Component instance")
        component_type = type(component)
        data = component_data(component)
        value = cls(name=component_type.__name__, fingerprint=component_type.component_fingerprint(), data=data)
        value._bind(component_type)
        return value

    @property
    def type_ref(self) -> ComponentTypeRef:
        ref = ComponentTypeRef(name=self.name, fingerprint=self.fingerprint)
        if self._affinity is not None:
            ref._bind(self._affinity)
        return ref

    def to_component(self, *, context: Any = None, component_type: type[Component] | None = None) -> Component:
        """Build the live component; ValueError if the data does not fit the class's schema.
        `context` is pydantic's validation context (admission passes `admission_context()`);
        `component_type` is the class `resolve()` already answered, if the caller has it."""
        return (component_type or self.resolve()).model_validate(self.data, context=context)


def live_component(value: ComponentValue, *, context: Any = None, component_type: type[Component] | None = None) -> Component:
    """The live component a wire value materializes as, checked canonical: what admission
    validates and what a durable materializer applies. LookupError when no class matches,
    ValueError when the data does not validate, NonCanonicalValueError when the live value
    (after the class's coercions and validators) has no canonical form."""
    return live_from_data(component_type or value.resolve(), value.data, context=context)


def live_from_data(component_type: type[Component], data: dict[str, Any], *, context: Any = None) -> Component:
    """`live_component` of a value given as its class and field JSON: what admission builds from a
    payload it has parsed but not decoded into models (`archetype.world.operations.payload_fits`)."""
    component = component_type.model_validate(data, context=context)
    if not canonical_by_validation(component_type):
        component_data(component)
    return component
