"""Idempotency evaluation: every way a client can replay or collide, with its expected outcome.

Each task runs against a fresh embedded runtime (local SQLite authority) and reports an outcome
word; the task passes when that word is the expected one.

    python -m evals.suites.idempotency.tasks
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from archetype import Runtime
from archetype.commands import (
    ActorCtx,
    CommandConflictError,
    CommandError,
    DeferredItem,
    DurableOptions,
    InvalidCommandError,
    Role,
    WorldClosingError,
)
from archetype.commands.authority import Authority
from archetype.world import Component, CreateWorld, Despawn, DestroyWorld, Spawn, Step, TickOutcomeUnknownError


class Marker(Component):
    value: int


WORLD = "eval-world"
ALICE = ActorCtx(principal="alice", roles={Role.player})
BOB = ActorCtx(principal="bob", roles={Role.player})


def despawn(entity_id: int = 1, world_id: str = WORLD) -> Despawn:
    return Despawn(world_id=world_id, entity_id=entity_id)


def at(tick: int = 0, **options) -> DurableOptions:
    return DurableOptions(tick=tick, **options)


@dataclass(frozen=True)
class Task:
    name: str
    expected: str
    run: Callable[[Runtime, Path], Awaitable[str]]


async def outcome(admission: Awaitable) -> str:
    """Map an admission to an outcome word."""
    try:
        result = await admission
    except CommandConflictError:
        return "conflict"
    except WorldClosingError:
        return "world-closing"
    except InvalidCommandError:
        return "invalid"
    items = result if isinstance(result, list) else [getattr(result, "command", result)]
    replayed = {item.replayed for item in items}
    return "replayed" if replayed == {True} else "admitted" if replayed == {False} else "mixed"


async def twice(rt: Runtime, first, second) -> str:
    await first(rt)
    return await outcome(second(rt))


def same(op_factory, options=None, cid="cmd"):
    return lambda rt: rt.dispatcher.defer(op_factory(), options or at(), command_id=cid)


async def after_restart(rt: Runtime, data: Path) -> str:
    await rt.dispatcher.defer(despawn(), at(), command_id="cmd")
    again = await Runtime.open_local(data)
    try:
        return await outcome(again.dispatcher.defer(despawn(), at(), command_id="cmd"))
    finally:
        await again.close()


async def from_another_runtime(rt: Runtime, data: Path) -> str:
    other = await Runtime.open_local(data, owner="other-process")
    try:
        await other.dispatcher.defer(despawn(), at(), command_id="cmd")
        return await outcome(rt.dispatcher.defer(despawn(), at(), command_id="cmd"))
    finally:
        await other.close()


async def replay_after_settlement(rt: Runtime, op, expected_status: str) -> str:
    await rt.dispatcher.defer(op, at(), command_id="cmd")
    await rt.dispatcher.apply(Step(world_id=WORLD))
    word = await outcome(rt.dispatcher.defer(op, at(), command_id="cmd"))
    await rt.dispatcher.apply(Step(world_id=WORLD))
    record = await rt.scheduler.command(WORLD, "cmd")
    return word if (record.status.value, record.attempts) == (expected_status, 1) else f"{word}-but-{record.status.value}"


async def concurrent_identical(rt: Runtime, data: Path) -> str:
    other = await Runtime.open_local(data, owner="other")
    try:
        results = await asyncio.gather(*(r.dispatcher.defer(despawn(), at(), command_id="cmd") for r in (rt, other, rt, other)))
        return "one-admitted" if sorted(r.replayed for r in results) == [False, True, True, True] else "broken"
    finally:
        await other.close()


async def lost_answer(rt: Runtime, second_op) -> str:
    authority = rt.scheduler.authority

    class Lossy(Authority):
        async def rpc(self, method, arguments):
            result = await authority.rpc(method, arguments)
            if method == "admit":
                raise ConnectionError("answer lost after commit")
            return result

    rt.scheduler.authority = Lossy()
    try:
        await rt.dispatcher.defer(despawn(), at(), command_id="cmd")
    except ConnectionError:
        pass
    rt.scheduler.authority = authority
    return await outcome(rt.dispatcher.defer(second_op, at(), command_id="cmd"))


async def spawn_retry(rt: Runtime, second: Spawn) -> str:
    first = await rt.dispatcher.defer_spawn_as(ALICE, Spawn(world_id=WORLD, components=[Marker(value=1)]), at(), command_id="s")
    before = (await rt.authority.world_info(world_id=WORLD))["next_entity_id"]
    try:
        again = await rt.dispatcher.defer_spawn_as(ALICE, second, at(), command_id="s")
    except CommandConflictError:
        after = (await rt.authority.world_info(world_id=WORLD))["next_entity_id"]
        return "conflict-nothing-allocated" if after == before else "conflict-but-allocated"
    return "same-entity" if again.entity_id == first.entity_id and again.command.replayed else "different-entity"


async def tick_publish_answer_lost(rt: Runtime, data: Path) -> str:
    await rt.dispatcher.defer(Spawn(world_id=WORLD, components=[Marker(value=1)]), at(), command_id="s")
    world = await rt.worlds.get(WORLD)
    publish = world.publisher.publish

    async def lossy(prepared):
        await publish(prepared)
        raise TickOutcomeUnknownError("published; answer lost")

    world.publisher.publish = lossy
    try:
        await world.step()
    except TickOutcomeUnknownError:
        pass
    world.publisher.publish = publish
    await world.step()
    applied = [e for e in await rt.authority.read_outbox(world_id=WORLD, limit=100) if e["event_type"] == "applied"]
    return "applied-once" if len(applied) == 1 and len(world.query(Marker)) == 1 else f"applied-{len(applied)}"


async def colliding_batch(rt: Runtime) -> str:
    await rt.dispatcher.defer_batch(batch(("a", 1)))
    word = await outcome(rt.dispatcher.defer_batch(batch(("b", 2), ("a", 3))))
    admitted = await rt.authority.command(world_id=WORLD, command_id="b")
    return f"{word}-nothing-admitted" if admitted is None else f"{word}-but-admitted"


def batch(*pairs) -> list[DeferredItem]:
    return [DeferredItem(op=despawn(entity), options=at(), command_id=cid) for cid, entity in pairs]


TASKS = [
    Task("identical replay, same process", "replayed", lambda rt, d: twice(rt, same(despawn), same(despawn))),
    Task("identical replay after a restart", "replayed", after_restart),
    Task("identical replay from another process", "replayed", from_another_runtime),
    Task("same id, different payload", "conflict", lambda rt, d: twice(rt, same(despawn), same(lambda: despawn(2)))),
    Task("same id, different target tick", "conflict", lambda rt, d: twice(rt, same(despawn), same(despawn, at(1)))),
    Task("same id, different priority", "conflict", lambda rt, d: twice(rt, same(despawn), same(despawn, at(0, priority=3)))),
    Task("same id, different attempt budget", "conflict",
         lambda rt, d: twice(rt, same(despawn), same(despawn, at(0, max_attempts=7)))),  # fmt: skip
    Task("same id, different principal is another command", "admitted", lambda rt, d: twice(
        rt, lambda r: r.dispatcher.defer_as(ALICE, despawn(), at(), command_id="cmd"),
        lambda r: r.dispatcher.defer_as(BOB, despawn(), at(), command_id="cmd"))),  # fmt: skip
    Task("same id, trusted then authenticated is another command", "admitted", lambda rt, d: twice(
        rt, same(despawn), lambda r: r.dispatcher.defer_as(ALICE, despawn(), at(), command_id="cmd"))),  # fmt: skip
    Task("same id in another world is another command", "admitted", lambda rt, d: twice(
        rt, same(despawn), lambda r: r.dispatcher.defer(despawn(world_id="eval-other"), at(), command_id="cmd"))),  # fmt: skip
    Task("replay after the command was rejected", "replayed", lambda rt, d: replay_after_settlement(rt, despawn(99), "REJECTED")),
    Task("replay after the command was applied", "replayed",
         lambda rt, d: replay_after_settlement(rt, Spawn(world_id=WORLD, components=[Marker(value=1)]), "APPLIED")),  # fmt: skip
    Task("replay after the world was destroyed", "world-closing", lambda rt, d: twice(
        rt, lambda r: _then_destroy(r), same(despawn))),  # fmt: skip
    Task("whole batch replayed", "replayed",
         lambda rt, d: twice(rt, lambda r: r.dispatcher.defer_batch(batch(("a", 1), ("b", 2))),
                             lambda r: r.dispatcher.defer_batch(batch(("a", 1), ("b", 2))))),  # fmt: skip
    Task("batch overlapping an earlier one", "mixed",
         lambda rt, d: twice(rt, lambda r: r.dispatcher.defer_batch(batch(("a", 1))),
                             lambda r: r.dispatcher.defer_batch(batch(("a", 1), ("b", 2))))),  # fmt: skip
    Task("batch with one colliding item admits nothing", "conflict-nothing-admitted", lambda rt, d: colliding_batch(rt)),
    Task("one id twice in one batch", "invalid",
         lambda rt, d: outcome(rt.dispatcher.defer_batch(batch(("a", 1), ("a", 1))))),  # fmt: skip
    Task("answer lost after commit, identical retry", "replayed", lambda rt, d: lost_answer(rt, despawn())),
    Task("answer lost after commit, different retry", "conflict", lambda rt, d: lost_answer(rt, despawn(5))),
    Task("concurrent identical submissions", "one-admitted", concurrent_identical),
    Task("spawn retry gets the same reserved entity", "same-entity",
         lambda rt, d: spawn_retry(rt, Spawn(world_id=WORLD, components=[Marker(value=1)]))),  # fmt: skip
    Task("spawn retry with other components", "conflict-nothing-allocated",
         lambda rt, d: spawn_retry(rt, Spawn(world_id=WORLD, components=[Marker(value=2)]))),  # fmt: skip
    Task("spawn id reused by a non-spawn command", "conflict", lambda rt, d: twice(
        rt, lambda r: r.dispatcher.defer_spawn(Spawn(world_id=WORLD, components=[Marker(value=1)]), at(), command_id="cmd"),
        same(despawn))),  # fmt: skip
    Task("tick publication answer lost, step retried", "applied-once", tick_publish_answer_lost),
]


async def _then_destroy(rt: Runtime) -> None:
    await rt.dispatcher.defer(despawn(), at(), command_id="cmd")
    await rt.dispatcher.apply(DestroyWorld(world_id=WORLD))


async def run_task(task: Task) -> str:
    with tempfile.TemporaryDirectory(prefix="archetype-eval-") as tmp:
        data = Path(tmp)
        rt = await Runtime.open_local(data)
        try:
            await rt.dispatcher.apply(CreateWorld(name="eval", world_id=WORLD))
            await rt.dispatcher.apply(CreateWorld(name="other", world_id="eval-other"))
            return await task.run(rt, data)
        except CommandError as exc:
            return f"error:{exc.code}"
        finally:
            await rt.close()


async def run_all() -> list[tuple[Task, str]]:
    return [(task, await run_task(task)) for task in TASKS]


def main() -> int:
    results = asyncio.run(run_all())
    failed = 0
    for task, observed in results:
        ok = observed == task.expected
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {task.name:<48} expected {task.expected:<28} observed {observed}")
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
