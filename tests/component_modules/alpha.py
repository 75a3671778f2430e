from archetype.world import Component


class Position(Component):
    x: float
    y: float


class Velocity(Component):
    dx: float
    dy: float


class Health(Component):
    hp: int
