from archetype.world import Component


class Position(Component):
    """Same name as alpha.Position, different schema."""

    x: int
    y: int
    z: int
