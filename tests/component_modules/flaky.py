"""Components whose validation fails on demand, to drive each failure class of the policy."""

from pydantic import field_validator

from archetype.world import Component

# label -> list of exceptions still to raise, in order (consumed one per validation)
FAILURES: dict[str, list[BaseException]] = {}


class Probe(Component):
    label: str

    @field_validator("label")
    @classmethod
    def _maybe_fail(cls, value: str) -> str:
        queue = FAILURES.get(value)
        if queue:
            raise queue.pop(0)
        return value
