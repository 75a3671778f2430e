from archetype.world import Component


class Position(Component):
    """Schema-identical to alpha.Position, defined in another module."""

    x: float
    y: float
