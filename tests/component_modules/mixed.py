from archetype.world import Component


class Tag(Component):
    """A component with a non-numeric field: its rows travel as data, not as numeric columns."""

    label: str
    weight: float
