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


def pytest_terminal_summary(terminalreporter):
    from tests.pyodide import host

    if host._shared is not None:
        t = host._shared.timings
        terminalreporter.write_line(
            f"pyodide harness: start-up {host._shared.startup_s:.1f} s (Pyodide {t['load_pyodide_ms'] / 1000:.1f} s, "
            f"wheels {t['install_wheels_ms'] / 1000:.1f} s, project imports {t['import_project_ms'] / 1000:.1f} s)"
        )
