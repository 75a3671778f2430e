"""Components whose class turns canonical wire data into a live value with no canonical form:
admission must build the live value and refuse these, not only check the wire data."""

import math
from typing import Any

from pydantic import field_validator, model_validator

from archetype.world import Component


class Counter(Component):
    """`n` is an int: pydantic accepts an integral float (1e20) and makes it a huge integer."""

    n: int


class Loose(Component):
    """Untyped data: anything canonical on the wire, live exactly as given."""

    value: Any


class Ratio(Component):
    """An inverse whose validator divides: 0 becomes an infinity (allow_inf_nan checks inputs only)."""

    inverse: float

    @field_validator("inverse", mode="after")
    @classmethod
    def _invert(cls, value: float) -> float:
        return 1 / value if value else math.inf


class Label(Component):
    """A validator that mangles one text into a lone surrogate."""

    text: str

    @field_validator("text")
    @classmethod
    def _mangle(cls, value: str) -> str:
        return value + "\udfff" if value == "mangle" else value


class Tree(Component):
    """`depth` levels of nesting built by the class from a small wire value."""

    depth: int
    tree: Any = None

    @model_validator(mode="before")
    @classmethod
    def _grow(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("tree") is None:
            tree: Any = []
            for _ in range(int(data.get("depth", 0))):
                tree = [tree]
            return {**data, "tree": tree}
        return data
