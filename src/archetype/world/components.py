"""Components and their portable identity.

A component type is identified on the wire by its class name plus the SHA-256 fingerprint of its
canonical *prefixed* schema: the pydantic JSON Schema with documentation keys removed and every
field name prefixed with the lower-cased class name and `__`. The module a class lives in is not
part of it, so schema-identical definitions survive module moves; a same-named class with another
schema has another fingerprint and is never guessed.

A directly constructed `ComponentTypeRef`/`ComponentValue` also keeps an immutable, non-wire
*affinity* to the caller's exact class, so direct mutations keep using that live class even when
several schema-identical classes are loaded. Decoding from the wire ignores affinity by design.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from archetype.canonical import check_canonical, digest

COMPONENT_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
FINGERPRINT_PATTERN = r"^[0-9a-f]{64}$"
_DOC_KEYS = frozenset({"title", "description", "examples"})

# (name, fingerprint) -> loaded classes in load order; the first one answers wire decoding.
_LOADED: dict[tuple[str, str], list[type[Component]]] = {}


def _strip_docs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_docs(v) for k, v in node.items() if k not in _DOC_KEYS}
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
    """Subclass this to define a component. Instances are immutable: replace them, don't mutate."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    __component_fingerprint__: ClassVar[str] = ""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.__component_fingerprint__ = digest(canonical_prefixed_schema(cls))
        _LOADED.setdefault((cls.__name__, cls.__component_fingerprint__), []).append(cls)

    @classmethod
    def component_fingerprint(cls) -> str:
        return cls.__component_fingerprint__


def resolve_component_class(name: str, fingerprint: str) -> type[Component]:
    """The loaded class for a wire identity; LookupError when none matches exactly."""
    classes = _LOADED.get((name, fingerprint))
    if not classes:
        same_name = any(key[0] == name for key in _LOADED)
        hint = " (a class of that name is loaded with another schema)" if same_name else ""
        raise LookupError(f"no loaded component {name!r} with fingerprint {fingerprint[:12]}...{hint}")
    return classes[0]


class _AffineWireModel(BaseModel):
    """A frozen wire model that may also carry an affinity to one exact component class."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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
        return self._affinity

    @property
    def key(self) -> str:
        """The identity the world stores components under: name and fingerprint."""
        return f"{self.name}:{self.fingerprint}"

    def resolve(self) -> type[Component]:
        """The class to build live values with: the affinity, else the wire identity."""
        return self._affinity or resolve_component_class(self.name, self.fingerprint)

    def _bind(self, cls: type[Component]) -> None:
        self.__pydantic_private__["_affinity"] = cls


def type_key(cls: type[Component]) -> str:
    return f"{cls.__name__}:{cls.component_fingerprint()}"


class ComponentTypeRef(_AffineWireModel):
    @classmethod
    def from_type(cls, component_type: type[Component]) -> ComponentTypeRef:
        if not (isinstance(component_type, type) and issubclass(component_type, Component)):
            raise TypeError(f"{component_type!r} is not a Component subclass")
        ref = cls(name=component_type.__name__, fingerprint=component_type.component_fingerprint())
        ref._bind(component_type)
        return ref


class ComponentValue(_AffineWireModel):
    data: dict[str, Any]

    @classmethod
    def from_component(cls, component: Component) -> ComponentValue:
        if not isinstance(component, Component):
            raise TypeError(f"{component!r} is not a Component instance")
        component_type = type(component)
        data = component.model_dump(mode="json")
        check_canonical(data)
        value = cls(name=component_type.__name__, fingerprint=component_type.component_fingerprint(), data=data)
        value._bind(component_type)
        return value

    @property
    def type_ref(self) -> ComponentTypeRef:
        ref = ComponentTypeRef(name=self.name, fingerprint=self.fingerprint)
        if self._affinity is not None:
            ref._bind(self._affinity)
        return ref

    def to_component(self) -> Component:
        """Build the live component; ValueError if the data does not fit the class's schema."""
        return self.resolve().model_validate(self.data)
