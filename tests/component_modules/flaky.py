"""Components whose validation fails on demand, to drive each failure class of the policy."""

from pydantic import ValidationInfo, field_validator

from archetype.world import Component
from archetype.world.components import admission_context

# label -> list of exceptions still to raise, in order (consumed one per validation)
FAILURES: dict[str, list[BaseException]] = {}


class Probe(Component):
    label: str

    @field_validator("label")
    @classmethod
    def _maybe_fail(cls, value: str, info: ValidationInfo) -> str:
        if info.context == admission_context():
            return value  # admission builds the live value too; the failures are for materialization
        queue = FAILURES.get(value)
        if queue:
            raise queue.pop(0)
        return value
