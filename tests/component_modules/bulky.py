"""Components whose data is as large as a command makes it: what grows an entity past the state
limits (docs/ledger.md, "Materialization and settlement")."""

from archetype.world import Component


class Note(Component):
    text: str


class Margin(Component):
    text: str


class Appendix(Component):
    text: str
