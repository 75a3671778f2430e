"""Component schemas as the authority keeps them, and the validator that checks data against them.

A world records the canonical prefixed schema of every component type it uses (see
`canonical_prefixed_schema` and docs/components.md), so an authority without the Python classes
(the Worker, the Durable Object) can still refuse component data that does not fit before it is
persisted. This module is that check; it is stdlib only, as it runs on Pyodide.

It implements exactly the part of JSON Schema that pydantic writes for a component: every keyword
below, and nothing else. `check_schema` refuses to record a schema that uses any other keyword
(`not`, `if`, `patternProperties`, a `$ref` outside `#/$defs/` ...), so nothing recorded can mean
more than this validator checks. Annotations (`default`, `format`, `discriminator`, `deprecated`,
`readOnly`, `writeOnly`) are accepted and not checked: `format` in particular is the class's to
enforce when the command materializes (docs/components.md, "Component schemas").

Numbers follow JSON, not Python: an `integer` is an int or an integral float (`1.0`), a boolean is
never a number, and `"1"` is not an integer even though pydantic's lax mode would coerce it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sized
from typing import Any

from archetype.canonical import digest, path_step

TYPES = ("string", "integer", "number", "boolean", "null", "array", "object")
ANNOTATIONS = frozenset({"default", "format", "discriminator", "deprecated", "readOnly", "writeOnly"})
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_VALUES = frozenset({"items", "propertyNames"})
_COUNTS = frozenset({"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"})
_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
KEYWORDS = ANNOTATIONS | _SCHEMA_LISTS | _SCHEMA_VALUES | _COUNTS | _BOUNDS | {
    "type", "properties", "required", "additionalProperties", "uniqueItems", "enum", "const", "pattern", "$ref",
}  # fmt: skip
RECORD_KEYS = ("component", "defs", "properties", "required")
REF_PREFIX = "#/$defs/"
# How many schemas may be entered at one data position ($ref -> anyOf -> $ref ...) before the
# schema is taken to loop without consuming data.
_MAX_SCHEMA_CHAIN = 64


class UnsupportedSchemaError(ValueError):
    """A schema outside the recorded subset, or not the canonical prefixed schema of its component."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


# A path into data is built only when something is refused: while validating it is a chain of
# (parent, step) pairs ending in the root's JSONPath string, one tuple per value visited.
Path = Any


def render(path: Path) -> str:
    """The JSONPath string of a (parent, step) chain."""
    steps = []
    while not isinstance(path, str):
        path, step = path
        steps.append(path_step(step))
    return path + "".join(reversed(steps))


class SchemaMismatchError(ValueError):
    """Component data that does not fit its recorded schema; `path` is a JSONPath into the data."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path, self.reason = render(path), reason
        super().__init__(f"{self.path}: {reason}")


def check_record(name: str, fingerprint: str, schema: Any) -> None:
    """Refuse a (name, fingerprint, schema) record that is not a canonical prefixed schema in the
    supported subset, or whose fingerprint is not the SHA-256 of its canonical JSON."""
    if not isinstance(schema, dict) or sorted(schema) != list(RECORD_KEYS):
        raise UnsupportedSchemaError("$", f"a component schema has exactly the keys {list(RECORD_KEYS)}")
    if schema["component"] != name:
        raise UnsupportedSchemaError("$.component", f"names {schema['component']!r}, not {name!r}")
    if digest(schema) != fingerprint:
        raise UnsupportedSchemaError("$", f"its fingerprint is {digest(schema)}, not {fingerprint}")
    properties, required, defs = schema["properties"], schema["required"], schema["defs"]
    prefix = name.lower() + "__"
    if not isinstance(properties, dict) or not all(key.startswith(prefix) for key in properties):
        raise UnsupportedSchemaError("$.properties", f"every property is prefixed {prefix!r}")
    if not isinstance(required, list) or not set(required) <= set(properties):
        raise UnsupportedSchemaError("$.required", "names only declared properties")
    if not isinstance(defs, dict):
        raise UnsupportedSchemaError("$.defs", "is an object of schemas")
    for key, node in properties.items():
        _check_node(node, f"$.properties{path_step(key)}", defs)
    for key, node in defs.items():
        _check_node(node, f"$.defs{path_step(key)}", defs)


def _check_node(node: Any, path: str, defs: Mapping[str, Any]) -> None:
    if not isinstance(node, dict):
        raise UnsupportedSchemaError(path, "a schema is an object")
    for keyword, value in node.items():
        where = path + path_step(keyword)
        if keyword not in KEYWORDS:
            raise UnsupportedSchemaError(where, "keyword not supported by the admission validator")
        if keyword == "type":
            kinds = value if isinstance(value, list) else [value]
            if not kinds or any(kind not in TYPES for kind in kinds):
                raise UnsupportedSchemaError(where, f"types are among {list(TYPES)}")
        elif keyword == "$ref":
            if not (isinstance(value, str) and value.startswith(REF_PREFIX) and value[len(REF_PREFIX) :] in defs):
                raise UnsupportedSchemaError(where, f"refers to {REF_PREFIX}<a def of this schema>")
        elif keyword in ("properties",):
            if not isinstance(value, dict):
                raise UnsupportedSchemaError(where, "is an object of schemas")
            for key, child in value.items():
                _check_node(child, where + path_step(key), defs)
        elif keyword == "required":
            if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
                raise UnsupportedSchemaError(where, "is a list of property names")
        elif keyword == "additionalProperties":
            if not isinstance(value, bool):
                _check_node(value, where, defs)
        elif keyword in _SCHEMA_LISTS:
            if not (isinstance(value, list) and value):
                raise UnsupportedSchemaError(where, "is a non-empty list of schemas")
            for index, child in enumerate(value):
                _check_node(child, where + path_step(index), defs)
        elif keyword in _SCHEMA_VALUES:
            _check_node(value, where, defs)
        elif keyword in _COUNTS:
            if type(value) is not int or value < 0:
                raise UnsupportedSchemaError(where, "is a non-negative integer")
        elif keyword in _BOUNDS:
            if type(value) not in (int, float) or (keyword == "multipleOf" and value <= 0):
                raise UnsupportedSchemaError(where, "is a number" + (" above 0" if keyword == "multipleOf" else ""))
        elif keyword == "uniqueItems":
            if type(value) is not bool:
                raise UnsupportedSchemaError(where, "is a boolean")
        elif keyword == "enum":
            if not isinstance(value, list):
                raise UnsupportedSchemaError(where, "is a list")
        elif keyword == "pattern":
            try:
                re.compile(value)
            except (re.error, TypeError):
                raise UnsupportedSchemaError(where, "is not a regular expression this validator runs") from None


def validate_data(schema: Mapping[str, Any], data: Any, path: Path = "$") -> None:
    """Check component `data` (its field JSON, unprefixed names) against its recorded `schema`;
    SchemaMismatchError names the first value that does not fit."""
    if not isinstance(data, dict):
        raise SchemaMismatchError(path, f"component data is an object, not {_kind(data)}")
    prefix = schema["component"].lower() + "__"
    properties = schema["properties"]
    for key, value in data.items():
        node = properties.get(prefix + key)
        if node is None:  # components are closed (extra="forbid")
            raise SchemaMismatchError((path, key), f"{schema['component']} has no field {key!r}")
        _Validator(schema["defs"]).check(node, value, (path, key), 0)
    for name in schema["required"]:
        if name[len(prefix) :] not in data:
            raise SchemaMismatchError(path, f"missing required field {name[len(prefix) :]!r}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


_IS: dict[str, Callable[[Any], bool]] = {
    # exact types: parsed JSON holds only these, and bool is not int here
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int or (type(v) is float and v.is_integer()),
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "array": lambda v: type(v) is list,
    "object": lambda v: type(v) is dict,
}


def _is_type(value: Any, kind: str) -> bool:
    return _IS[kind](value)


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON means it: 1 == 1.0, but a boolean equals only a boolean."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


class _Validator:
    def __init__(self, defs: Mapping[str, Any]) -> None:
        self.defs = defs

    def check(self, node: Mapping[str, Any], value: Any, path: Path, chain: int) -> None:
        if chain > _MAX_SCHEMA_CHAIN:
            raise SchemaMismatchError(path, "the schema refers to itself without consuming data")
        for keyword, argument in node.items():
            check = _CHECKS.get(keyword)
            if check is not None:
                check(self, argument, node, value, path, chain)

    def fits(self, node: Mapping[str, Any], value: Any, path: Path, chain: int) -> SchemaMismatchError | None:
        try:
            self.check(node, value, path, chain + 1)
        except SchemaMismatchError as exc:
            return exc
        return None

    def children(self, node: Mapping[str, Any], value: Any, path: Path) -> None:
        self.check(node, value, path, 0)


def _type(v: _Validator, kinds: Any, node: Any, value: Any, path: Path, chain: int) -> None:
    if isinstance(kinds, str) and _is_type(value, kinds):
        return
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if not any(_is_type(value, kind) for kind in kinds):
        raise SchemaMismatchError(path, f"expected {' or '.join(kinds)}, got {_kind(value)}")


def _ref(v: _Validator, ref: str, node: Any, value: Any, path: Path, chain: int) -> None:
    v.check(v.defs[ref[len(REF_PREFIX) :]], value, path, chain + 1)


def _any_of(v: _Validator, options: list[Any], node: Any, value: Any, path: Path, chain: int) -> None:
    failures = [v.fits(option, value, path, chain) for option in options]
    if all(failures):
        deepest = max((f for f in failures if f is not None), key=lambda f: len(f.path))
        if deepest.path != render(path):  # one option got further into the value: its complaint is the useful one
            raise deepest
        raise SchemaMismatchError(path, "fits none of: " + "; ".join(sorted({f.reason for f in failures if f})))


def _one_of(v: _Validator, options: list[Any], node: Any, value: Any, path: Path, chain: int) -> None:
    _any_of(v, options, node, value, path, chain)
    if sum(v.fits(option, value, path, chain) is None for option in options) > 1:
        raise SchemaMismatchError(path, "fits more than one of the alternatives")


def _all_of(v: _Validator, options: list[Any], node: Any, value: Any, path: Path, chain: int) -> None:
    for option in options:
        v.check(option, value, path, chain + 1)


def _properties(v: _Validator, properties: dict[str, Any], node: Any, value: Any, path: Path, chain: int) -> None:
    if isinstance(value, dict):
        for key, child in properties.items():
            if key in value:
                v.children(child, value[key], (path, key))


def _required(v: _Validator, names: list[str], node: Any, value: Any, path: Path, chain: int) -> None:
    if isinstance(value, dict):
        for name in names:
            if name not in value:
                raise SchemaMismatchError(path, f"missing required field {name!r}")


def _additional(v: _Validator, extra: Any, node: Any, value: Any, path: Path, chain: int) -> None:
    if not isinstance(value, dict):
        return
    declared = node.get("properties", {})
    for key, item in value.items():
        if key in declared:
            continue
        if extra is False:
            raise SchemaMismatchError((path, key), f"unexpected field {key!r}")
        if isinstance(extra, dict):
            v.children(extra, item, (path, key))


def _property_names(v: _Validator, names: Any, node: Any, value: Any, path: Path, chain: int) -> None:
    if isinstance(value, dict):
        for key in value:
            v.children(names, key, (path, key))


def _items(v: _Validator, items: Any, node: Any, value: Any, path: Path, chain: int) -> None:
    if isinstance(value, list):
        skip = len(node.get("prefixItems", ()))
        for index in range(skip, len(value)):
            v.children(items, value[index], (path, index))


def _prefix_items(v: _Validator, items: list[Any], node: Any, value: Any, path: Path, chain: int) -> None:
    if isinstance(value, list):
        for index, (child, item) in enumerate(zip(items, value, strict=False)):
            v.children(child, item, (path, index))


def _count(keyword: str) -> Callable[..., None]:
    kinds: dict[str, tuple[type[Sized], str]] = {
        "Items": (list, "items"),
        "Length": (str, "characters"),
        "Properties": (dict, "fields"),
    }
    kind = kinds[keyword[3:]]
    at_least = keyword.startswith("min")

    def check(v: _Validator, bound: int, node: Any, value: Any, path: Path, chain: int) -> None:
        if isinstance(value, kind[0]) and (len(value) < bound if at_least else len(value) > bound):
            raise SchemaMismatchError(
                path, f"has {len(value)} {kind[1]}, {'at least' if at_least else 'at most'} {bound} allowed"
            )

    return check


def _not_multiple(x: Any, b: Any) -> bool:
    if isinstance(x, int) and isinstance(b, int):
        return x % b != 0
    return not (x / b).is_integer()


def _bound(keyword: str) -> Callable[..., None]:
    fails: dict[str, Callable[[Any, Any], bool]] = {
        "minimum": lambda x, b: x < b,
        "maximum": lambda x, b: x > b,
        "exclusiveMinimum": lambda x, b: x <= b,
        "exclusiveMaximum": lambda x, b: x >= b,
        "multipleOf": _not_multiple,
    }
    fail = fails[keyword]

    def check(v: _Validator, bound: float, node: Any, value: Any, path: Path, chain: int) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and fail(value, bound):
            raise SchemaMismatchError(path, f"{value!r} breaks {keyword} {bound!r}")

    return check


def _unique(v: _Validator, unique: bool, node: Any, value: Any, path: Path, chain: int) -> None:
    if unique and isinstance(value, list):
        for i, item in enumerate(value):
            if any(json_equal(item, earlier) for earlier in value[:i]):
                raise SchemaMismatchError((path, i), "repeats an earlier item")


def _enum(v: _Validator, options: list[Any], node: Any, value: Any, path: Path, chain: int) -> None:
    if not any(json_equal(value, option) for option in options):
        raise SchemaMismatchError(path, f"is not one of {options!r}")


def _const(v: _Validator, constant: Any, node: Any, value: Any, path: Path, chain: int) -> None:
    if not json_equal(value, constant):
        raise SchemaMismatchError(path, f"is not {constant!r}")


def _pattern(v: _Validator, pattern: str, node: Any, value: Any, path: Path, chain: int) -> None:
    if isinstance(value, str) and re.search(pattern, value) is None:
        raise SchemaMismatchError(path, f"does not match {pattern!r}")


_CHECKS: dict[str, Callable[..., None]] = {
    "type": _type, "$ref": _ref, "anyOf": _any_of, "oneOf": _one_of, "allOf": _all_of, "properties": _properties,
    "required": _required, "additionalProperties": _additional, "propertyNames": _property_names, "items": _items,
    "prefixItems": _prefix_items, "uniqueItems": _unique, "enum": _enum, "const": _const, "pattern": _pattern,
    **{keyword: _count(keyword) for keyword in _COUNTS}, **{keyword: _bound(keyword) for keyword in _BOUNDS},
}  # fmt: skip


VALUE_KEYS = frozenset({"name", "fingerprint", "data"})
REF_KEYS = frozenset({"name", "fingerprint"})


def component_occurrences(value: Any, path: Path = "$") -> list[tuple[str, str, str, Any]]:
    """Every component value and type reference in a JSON document (a durable payload, an
    entity's component list), found by its wire shape: an object with exactly the keys
    name/fingerprint/data is a value, exactly name/fingerprint a reference. Each is
    `(path, name, fingerprint, data)`, data None for a reference, in document order; a value's data is not searched."""
    return [(render(where), name, fingerprint, data) for where, name, fingerprint, data in occurrences(value, path)]


def occurrences(value: Any, path: Path = "$") -> list[tuple[Path, str, str, Any]]:
    """`component_occurrences` with each path left as its (parent, step) chain: admission renders
    one only for the occurrence it refuses."""
    found: list[tuple[Path, str, str, Any]] = []
    pending: list[tuple[Path, Any]] = [(path, value)]
    push = pending.append
    pop = pending.pop
    while pending:
        where, node = pop()
        # a stack: children are pushed last first, so the document order comes out; scalars hold
        # no component, so only containers are pushed
        if isinstance(node, dict):
            # exactly VALUE_KEYS or REF_KEYS, both names strings: asked as two look-ups and a size
            # (comparing the key set hashed each key into the frozenset: a tenth of the walk)
            name = node.get("name")
            fingerprint = node.get("fingerprint")
            if (
                isinstance(name, str)
                and isinstance(fingerprint, str)
                and (len(node) == 2 or (len(node) == 3 and "data" in node))
            ):
                found.append((where, name, fingerprint, node.get("data")))
                continue
            for key, item in reversed(node.items()):
                if isinstance(item, (dict, list)):
                    push(((where, key), item))
        elif isinstance(node, list):
            for index in range(len(node) - 1, -1, -1):
                item = node[index]
                if isinstance(item, (dict, list)):
                    push(((where, index), item))
    return found


# -- validate_data compiled for one schema --
# Admission checks the same few component types over and over; walking the schema's keywords for
# every value (validate_data) is most of the check's cost. `data_validator` compiles a schema once
# into predicates that only say whether data fits: data they pass validate_data passes too (each
# predicate passes only what the keyword's check passes, and a keyword they cannot decide alone,
# `oneOf`, passes nothing), and anything else is handed to validate_data itself, so every refusal
# and its message are validate_data's.
Fits = Callable[[Any], bool]


def data_validator(schema: Mapping[str, Any]) -> Callable[[Any, Path], None]:
    """`validate_data(schema, data, path)` as a function of (data, path), compiled for this schema."""
    fits = _compile_fits(schema)

    def validate(data: Any, path: Path = "$") -> None:
        try:
            fitted = fits(data)
        except Exception:  # (RecursionError on deep data, a type the keyword checks did not expect)
            fitted = False
        if not fitted:
            validate_data(schema, data, path)

    return validate


def _never(value: Any) -> bool:
    return False


def _always(value: Any) -> bool:
    return True


def _compile_fits(schema: Mapping[str, Any]) -> Fits:
    prefix = schema["component"].lower() + "__"
    defs: Mapping[str, Any] = schema["defs"]
    # a def compiled at each depth of schemas entered at one data position it is reached at, as
    # validate_data counts them (_MAX_SCHEMA_CHAIN); late bound, so a def may contain itself
    compiled: dict[tuple[str, int], Fits] = {}

    def ref(name: str, depth: int) -> Fits:
        key = (name, depth)
        if key not in compiled:
            compiled[key] = _never  # entered again before it is compiled: only through a loop
            compiled[key] = node(defs[name], depth)
        target = compiled[key]
        if target is not _never:
            return target
        return lambda value: compiled[key](value)

    def node(schema_node: Any, depth: int) -> Fits:
        if depth > _MAX_SCHEMA_CHAIN or not isinstance(schema_node, Mapping):
            return _never
        checks = [keyword_fits(keyword, argument, schema_node, depth) for keyword, argument in schema_node.items()
                  if keyword in _CHECKS]  # fmt: skip
        if not checks:
            return _always
        if len(checks) == 1:
            return checks[0]

        def every(value: Any) -> bool:
            for check in checks:
                if not check(value):
                    return False
            return True

        return every

    def keyword_fits(keyword: str, argument: Any, schema_node: Mapping[str, Any], depth: int) -> Fits:
        if keyword == "type":
            kinds = [argument] if isinstance(argument, str) else argument
            if not isinstance(kinds, list) or not all(kind in _IS for kind in kinds):
                return _never
            tests = [_IS[kind] for kind in kinds]
            if len(tests) == 1:
                return tests[0]
            return lambda value: any(test(value) for test in tests)
        if keyword == "$ref":
            if not isinstance(argument, str) or argument[len(REF_PREFIX) :] not in defs:
                return _never
            return ref(argument[len(REF_PREFIX) :], depth + 1)
        if keyword in ("anyOf", "allOf"):
            if not isinstance(argument, list):
                return _never
            options = [node(option, depth + 1) for option in argument]
            if keyword == "anyOf":
                return lambda value: any(option(value) for option in options)
            return lambda value: all(option(value) for option in options)
        if keyword == "oneOf":  # exactly one option: a predicate that fails may not prove an option does not fit
            return _never
        if keyword == "properties":
            if not isinstance(argument, dict):
                return _never
            fields = [(key, node(child, 0)) for key, child in argument.items()]

            def properties(value: Any) -> bool:
                if isinstance(value, dict):
                    for key, child in fields:
                        if key in value and not child(value[key]):
                            return False
                return True

            return properties
        if keyword == "required":
            return lambda value: not isinstance(value, dict) or all(name in value for name in argument)
        if keyword == "additionalProperties":
            declared = schema_node.get("properties", {})
            if argument is False:
                return lambda value: not isinstance(value, dict) or all(key in declared for key in value)
            if not isinstance(argument, dict):
                return _always
            extra = node(argument, 0)
            return lambda value: not isinstance(value, dict) or all(
                key in declared or extra(item) for key, item in value.items()
            )
        if keyword == "propertyNames":
            names = node(argument, 0)
            return lambda value: not isinstance(value, dict) or all(names(key) for key in value)
        if keyword == "items":
            items, skip = node(argument, 0), len(schema_node.get("prefixItems", ()))
            return lambda value: not isinstance(value, list) or all(items(item) for item in value[skip:])
        if keyword == "prefixItems":
            if not isinstance(argument, list):
                return _never
            prefixed = [node(child, 0) for child in argument]
            return lambda value: not isinstance(value, list) or all(
                child(item) for child, item in zip(prefixed, value, strict=False)
            )
        return _leaf(_CHECKS[keyword], argument, schema_node)

    fields = {key[len(prefix) :]: node(child, 0) for key, child in schema["properties"].items() if key.startswith(prefix)}
    required = [name[len(prefix) :] for name in schema["required"]]

    def fits(data: Any) -> bool:
        if not isinstance(data, dict):
            return False
        for key, value in data.items():
            field = fields.get(key)
            if field is None or not field(value):
                return False
        for name in required:
            if name not in data:
                return False
        return True

    return fits


def _leaf(check: Callable[..., None], argument: Any, schema_node: Mapping[str, Any]) -> Fits:
    """A keyword that looks at the value alone (bounds, counts, enum, const, pattern, uniqueItems):
    its own check, asked whether it raises."""

    def fits(value: Any) -> bool:
        try:
            check(None, argument, schema_node, value, "$", 0)
        except Exception:
            return False
        return True

    return fits
