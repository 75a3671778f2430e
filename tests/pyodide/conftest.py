"""Rung 3 of the verification ladder (DESIGN.md): the project's Python on a real Pyodide
interpreter, the CPython of the Python Workers runtime, with JavaScript bindings. One Node
process serves the whole session (tests/pyodide/host.py)."""

from __future__ import annotations

import pytest

from tests.pyodide.host import PyodideHost, missing_setup, shared_host


@pytest.fixture(scope="session")
def pyodide() -> PyodideHost:
    reason = missing_setup()
    if reason is not None:
        pytest.fail(reason)
    return shared_host()
