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


# label -> the value a Gauge's validator turns its reading into (a coercion that yields a
# non-canonical live value, such as an integer beyond +/-(2**53-1), however canonical the input)
INFLATE: dict[str, object] = {}


class Gauge(Component):
    label: str
    reading: int

    @field_validator("reading", mode="after")
    @classmethod
    def _maybe_inflate(cls, value: int, info) -> int:
        return INFLATE.get(info.data.get("label"), value)  # type: ignore[return-value]
