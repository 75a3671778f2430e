"""A later version of a component, for schema migrations (tests/model/test_stateful.py)."""

from archetype.world import Component


class Vitality(Component):
    """What `alpha.Health` becomes under a declared migration: the same field under a new name,
    so a new fingerprint."""

    hp: int
