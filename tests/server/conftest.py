from __future__ import annotations

import pytest

from archetype.api import create_app
from local_catalog import open_local_authority
from tests.api.conftest import TOKENS
from tests.server.loopback import LoopbackServer


@pytest.fixture
async def served(tmp_path):
    authority = open_local_authority(tmp_path / "data")
    with LoopbackServer(create_app(authority, tokens=TOKENS)) as server:
        yield server
    await authority.close()
