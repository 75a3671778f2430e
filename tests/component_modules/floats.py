"""Components of plain float fields: one admission may check as given (`Point`), one it may not
(`Wild`, whose validation accepts non-finite floats)."""

from pydantic import ConfigDict

from archetype.world import Component


class Point(Component):
    x: float
    y: float = 0.0


class Wild(Component):
    """Plain floats that may be infinite: validation alone does not make it canonical."""

    model_config = ConfigDict(allow_inf_nan=True)
    x: float
