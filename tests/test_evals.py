"""Every evaluation task must observe its expected outcome."""

import pytest

from evals.suites.idempotency.tasks import TASKS, run_task


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
async def test_idempotency_task(task):
    assert await run_task(task) == task.expected
