from __future__ import annotations

from collections.abc import Iterator

import pytest

from archetype import Client
from tests.support.workerd.python_worker import ADMIN_TOKEN, PythonWorker


@pytest.fixture
def admin(workerd_python: PythonWorker) -> Iterator[Client]:
    """A Client of the session's deployment with an admin token."""
    with Client(workerd_python.url, token=ADMIN_TOKEN) as client:
        yield client
