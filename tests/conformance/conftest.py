from __future__ import annotations

import pytest

from archetype.runtime import Runtime
from tests.conformance.authorities import AUTHORITY_FACTORIES, authorities_of

LEASE_MS = 1_000


def pytest_generate_tests(metafunc):
    """A test using `authority` runs once per authority its file chose (authorities.py)."""
    if "authority" in metafunc.fixturenames:
        metafunc.parametrize("authority", authorities_of(metafunc.module), indirect=True)


@pytest.fixture
async def authority(request, tmp_path, clock):
    async with AUTHORITY_FACTORIES[request.param](tmp_path / "authority", clock) as authority:
        yield authority


@pytest.fixture
def make_runtime(authority):
    """Runtimes sharing one authority behave like separate runner processes (own owner, own worlds)."""
    made = []

    def make(owner: str = "runner-a", **options) -> Runtime:
        rt = Runtime(authority, owner=owner, lease_ms=options.pop("lease_ms", LEASE_MS), **options)
        made.append(rt)
        return rt

    return make


@pytest.fixture
def rt(make_runtime) -> Runtime:
    return make_runtime()


@pytest.fixture
async def world_id(rt) -> str:
    from archetype.world import CreateWorld

    return await rt.dispatcher.apply(CreateWorld(name="conformance", world_id="w-conf"))
