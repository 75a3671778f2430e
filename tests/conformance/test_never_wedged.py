"""Whatever one command does, its outcome is recorded and the tick publishes (docs/ledger.md,
"Materialization and settlement"): hostile exceptions and messages, and commands growing state
past what the authority stores, settle their command and leave the world stepping."""

import asyncio
import contextlib
import itertools
import os
import unicodedata
from contextlib import AsyncExitStack
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archetype import Permanent, Retryable
from archetype.api.errors import PayloadTooLargeError
from archetype.commands import CommandError, CommandStatus, InvalidCommandError
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import AddComponents, CreateWorld, Spawn
from archetype.world.error_text import ERROR_TEXT_LIMIT
from archetype.world.limits import StateTooLargeError
from tests.component_modules.bulky import Appendix, Margin, Note
from tests.conformance.authorities import AUTHORITY_FACTORIES, LEDGERS
from tests.conformance.helpers import at, fail_next, manifests, outbox, probe, records, step
from tests.support.faults import AuthoritySeam

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"

EXAMPLES_PER_AUTHORITY = int(os.environ.get("ARCHETYPE_HOSTILE_EXAMPLES", "20"))


class Unprintable(RuntimeError):
    def __str__(self) -> str:
        raise RuntimeError("str() of this exception raises")


async def test_an_exception_whose_str_raises_settles_its_command(rt, world_id, authority):
    fail_next("a", Unprintable())
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    await rt.dispatcher.defer(probe(world_id, "b"), at(0), command_id="b")
    await step(rt, world_id)
    a = (await records(rt, world_id))["a"]
    assert (a.status, a.attempts) == (CommandStatus.RETRYABLE, 1)
    assert a.last_error.startswith("Unprintable")
    await step(rt, world_id)
    assert {r.status for r in (await records(rt, world_id)).values()} == {CommandStatus.APPLIED}
    assert (await authority.world_info(world_id))["health"] == "ACTIVE"


async def test_a_failure_message_with_a_lone_surrogate_settles_canonically(rt, world_id, authority):
    path = os.fsdecode(b"/saves/caf\xe9.dat")  # a file name that is not UTF-8: a lone surrogate
    fail_next("a", RuntimeError(f"cannot open {path}"))
    await rt.dispatcher.defer(probe(world_id, "a"), at(0, max_attempts=1), command_id="a")
    await rt.dispatcher.defer(probe(world_id, "b"), at(0), command_id="b")
    await step(rt, world_id)
    result = await records(rt, world_id)
    assert (result["a"].status, result["b"].status) == (CommandStatus.DEAD_LETTER, CommandStatus.APPLIED)
    assert result["a"].last_error == "RuntimeError: cannot open /saves/caf\\udce9.dat"


async def test_commands_growing_an_entity_past_the_state_limits_are_rejected_and_the_others_apply(rt, world_id, authority):
    """Three ordinary commands, each well under the HTTP body limit, grow one entity: the one that
    would take it past the limits is REJECTED with a typed error, the others apply, the tick publishes."""
    size = 700_000
    spawned = await rt.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[Note(text="n" * size)]), at(0))
    entity = spawned.entity_id
    for number, cls in enumerate((Margin, Appendix)):
        op = AddComponents(world_id=world_id, entity_id=entity, components=[cls(text="m" * size)])
        await rt.dispatcher.defer(op, at(0), command_id=f"grow-{number}")
    await rt.dispatcher.defer(probe(world_id, "after"), at(0), command_id="after")
    await step(rt, world_id)
    result = await records(rt, world_id)
    assert result["after"].status == CommandStatus.APPLIED
    rejected = [r for r in result.values() if r.status == CommandStatus.REJECTED]
    assert rejected and all(r.last_error.startswith("StateTooLargeError: ") for r in rejected), result
    assert (await authority.world_info(world_id))["tick_head"] == 0
    await rt.dispatcher.defer(probe(world_id, "later"), at(1), command_id="later")
    await step(rt, world_id)
    assert (await records(rt, world_id))["later"].status == CommandStatus.APPLIED



def refuse_once(method: str, error: CommandError):
    """A seam hook: the first `method` call is refused with `error` before it runs."""
    refusals = [error]

    def before(called: str, arguments: dict) -> None:
        if called == method and refusals:
            raise refusals.pop()

    return before


REFUSALS = [InvalidCommandError("a state chunk is too large"), PayloadTooLargeError("request bodies are limited to 1 MiB")]


@pytest.mark.parametrize("refusal", REFUSALS, ids=["invalid_command", "payload_too_large"])
async def test_a_publication_refused_for_what_it_carries_is_dropped_and_run_again(authority, world_id, refusal):
    """Republishing the same bytes would be refused forever: the prepared tick is dropped, the
    failure recorded (its leases given back), and the next step runs the tick again."""
    rt = Runtime(AuthoritySeam(authority, before=refuse_once("publish", refusal)), owner="runner-a", lease_ms=1_000)
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    with pytest.raises(type(refusal)):
        await step(rt, world_id)
    info = await authority.world_info(world_id)
    assert (info["health"], info["tick_head"]) == ("STALLED", -1)
    assert info["health_error"] == f"{type(refusal).__name__}: {refusal.message}"
    assert world_id not in rt.worlds.loaded  # its prepared tick with it
    row = await authority.command(world_id, "a")
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("PENDING", 0, None)
    assert await step(rt, world_id) == 1
    assert (await authority.world_info(world_id))["health"] == "ACTIVE"
    assert [e["event_type"] for e in await outbox(authority, world_id) if e["command_id"] == ""] == [
        "world_stalled", "world_recovered"]


async def test_a_processor_writing_past_the_chunk_limit_stalls_the_world_before_its_tick_is_prepared(rt, world_id, authority):
    """Processors are not held to the state limits as they write; their tick fails before it is
    prepared, with the reason, instead of being refused at publication."""
    await rt.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[Note(text="n")]), at(0))
    await step(rt, world_id)
    world = await rt.worlds.get(world_id)
    world.add_processor(lambda w, tick, entity_id, components: w.update(entity_id, [Note(text="n" * 2_100_000)]), Note)
    with pytest.raises(StateTooLargeError):
        await step(rt, world_id)
    info = await authority.world_info(world_id)
    assert (info["health"], info["tick_head"]) == ("STALLED", 0)
    assert info["health_error"].startswith("StateTooLargeError: the tick's state write has a chunk of 2,100,")


async def test_a_world_that_cannot_load_is_stalled_with_the_reason_and_recovers(authority, world_id):
    """A load that fails once the writer is taken is a failure of the world, recorded like a tick's."""

    def before(called: str, arguments: dict) -> None:
        if called == "load_state" and failures:
            raise failures.pop()

    failures = [RuntimeError("the state could not be read")]
    rt = Runtime(AuthoritySeam(authority, before=before), owner="runner-a", lease_ms=1_000)
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    with pytest.raises(RuntimeError, match="could not be read"):
        await step(rt, world_id)
    info = await authority.world_info(world_id)
    assert (info["health"], info["health_error"]) == ("STALLED", "RuntimeError: the state could not be read")
    assert await step(rt, world_id) == 1
    assert (await authority.world_info(world_id))["health"] == "ACTIVE"

# -- the property: hostile exceptions, messages and sizes, through every authority ------------------
class Abort(BaseException):
    """A process-fatal exception of the test's own (as SystemExit is): it propagates, never swallowed."""


class HostileStr(str):
    """A string whose own methods raise: error text must read it as a plain str."""

    def _refuse(self, *args, **kwargs):
        raise RuntimeError("a hostile str method ran")

    __getitem__ = __len__ = __iter__ = translate = encode = splitlines = lower = isascii = isprintable = _refuse  # type: ignore[assignment]


class HostileRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr() of an argument raises")


def _raise(exc: BaseException):
    raise exc


BASES = {"runtime": RuntimeError, "value": ValueError, "key": KeyError, "type": TypeError, "os": OSError,
         "recursion": RecursionError, "retryable": Retryable, "permanent": Permanent, "abort": Abort}  # fmt: skip
# what __str__ (and __repr__) do: the default, raise, raise a BaseException, answer no string, a
# hostile str subclass, recurse forever, a message megabytes long, or the drawn text
STR_KINDS = ("default", "raises", "raises_base", "non_str", "hostile_str", "recursion", "huge", "text")
ARGS_KINDS = ("none", "text", "recursive", "hostile_repr", "huge")
META_KINDS = ("default", "raises", "non_str")
# the drawn text: what a failure message picks up from the world (file names, user input)
PIECES = ("a", "é", "\x00", "\x1b[31m", "\n", "\t", "\ud800", "\udce9", "\u202e", "\U0001f600", "\x7f", "\\", '"')
NOTE_SIZES = (10, 700_000, 999_990)  # a Note's text: fine, large, over the component limit (an entity over: above)


@dataclass(frozen=True)
class Hostile:
    base: str
    str_kind: str
    repr_kind: str
    args_kind: str
    meta_kind: str
    del_raises: bool
    text: str

    def build(self) -> BaseException:
        text = self.text

        def behaviour(kind: str):
            return {
                "raises": lambda self: _raise(RuntimeError("str() raises")),
                "raises_base": lambda self: _raise(Abort("str() raises a BaseException")),
                "non_str": lambda self: 42,
                "hostile_str": lambda self: HostileStr(text),
                "recursion": lambda self: str(self),
                "huge": lambda self: (text or "x") * (3_000_000 // max(1, len(text))),
                "text": lambda self: text,
            }.get(kind)

        namespace = {}
        for dunder, kind in (("__str__", self.str_kind), ("__repr__", self.repr_kind)):
            if behaviour(kind) is not None:
                namespace[dunder] = behaviour(kind)
        if self.del_raises:
            namespace["__del__"] = lambda self: _raise(RuntimeError("__del__ raises"))
        meta: type = type
        if self.meta_kind != "default":
            answer = {"raises": lambda cls: _raise(RuntimeError("__name__ raises")), "non_str": lambda cls: 42}[self.meta_kind]
            meta = type("HostileMeta", (type,), {"__name__": property(answer)})
        cls = meta("Hostile", (BASES[self.base],), namespace)
        recursive: list = []
        recursive.append(recursive)
        args = {"none": (), "text": (text,), "recursive": (recursive,), "hostile_repr": (HostileRepr(),),
                "huge": ("y" * 3_000_000,)}[self.args_kind]  # fmt: skip
        return cls(*args)


# weighted towards the drawn text reaching the message (the default str() of a text argument)
hostiles = st.builds(
    Hostile, base=st.sampled_from(sorted(BASES)), str_kind=st.sampled_from(STR_KINDS + ("default", "text") * 2),
    repr_kind=st.sampled_from(STR_KINDS), args_kind=st.sampled_from(ARGS_KINDS + ("text",) * 3),
    meta_kind=st.sampled_from(META_KINDS + ("default",) * 3), del_raises=st.booleans(),
    text=st.lists(st.sampled_from(PIECES) | st.text(max_size=3), min_size=1, max_size=8).map("".join),
)  # fmt: skip


def safe(error: str | None) -> bool:
    """What every recorded error text is: bounded, valid Unicode, no control character but \\n and \\t."""
    if error is None:
        return True
    error.encode("utf-8")  # raises on a lone surrogate
    return len(error) <= ERROR_TEXT_LIMIT and all(c in "\n\t" or unicodedata.category(c) != "Cc" for c in error)


EXAMPLES = itertools.count()


async def keeps_stepping(authority, clock, hostile: Hostile, note_size: int) -> None:
    rt = Runtime(authority, owner="runner-a", lease_ms=1_000)
    world_id = await rt.dispatcher.apply(CreateWorld(name="hostile", world_id=f"hostile-{next(EXAMPLES)}"))
    label = f"{world_id}-probe"
    fail_next(label, hostile.build())
    await rt.dispatcher.defer(probe(world_id, label), at(0, max_attempts=2), command_id="hostile")
    note = await rt.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[Note(text="n" * note_size)]), at(0))
    await rt.dispatcher.defer(probe(world_id, "innocent"), at(0), command_id="innocent")
    for _ in range(6):  # the hostile command settles within its budget, whatever it raised
        clock.advance(10)
        with contextlib.suppress(Abort):  # propagated (as SystemExit would), the session ended: nothing written
            await step(rt, world_id)
        result = await records(rt, world_id)
        if all(r.status.terminal for r in result.values()):
            break
    assert all(r.status.terminal for r in result.values()), result
    assert result["innocent"].status == CommandStatus.APPLIED
    spawned = next(r for r in result.values() if r.reserved_entity_id == note.entity_id)
    rejected = spawned.status == CommandStatus.REJECTED
    assert rejected == (note_size > 999_000) and (not rejected or spawned.last_error.startswith("StateTooLargeError: "))
    info = await authority.world_info(world_id)
    assert info["health"] == "ACTIVE" and info["tick_head"] >= 0
    for manifest in await manifests(authority, world_id):
        assert all(safe(s["error"]) for s in manifest["settlements"]), manifest["settlements"]
    assert all(safe(r.last_error) for r in result.values())
    await rt.worlds.close()  # gives the leases back; the authority serves the next example


@pytest.mark.timeout(600)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the __del__ that raises
@pytest.mark.parametrize("name", sorted(AUTHORITY_FACTORIES))
def test_whatever_a_command_raises_and_writes_the_world_keeps_stepping(name, tmp_path):
    loop, clock, stack = asyncio.new_event_loop(), ManualClock(), AsyncExitStack()
    authority = loop.run_until_complete(stack.enter_async_context(AUTHORITY_FACTORIES[name](tmp_path / "authority", clock)))

    @settings(max_examples=EXAMPLES_PER_AUTHORITY, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(hostile=hostiles, note_size=st.sampled_from(NOTE_SIZES))
    def example(hostile: Hostile, note_size: int) -> None:
        loop.run_until_complete(keeps_stepping(authority, clock, hostile, note_size))

    try:
        example()
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()
