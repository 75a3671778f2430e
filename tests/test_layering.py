"""The layering contract: code that runs in a Cloudflare Worker (Pyodide) imports only the
standard library, pydantic, the HTTP framework and the Workers runtime, and never the CPython-only
parts of the project (runtime, CLI, local catalog, audit projector, HTTP client, local server)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

SHARED_CORE = ("archetype.canonical", "archetype.world", "archetype.commands")
PYDANTIC = {"pydantic", "pydantic_core", "typing_extensions"}  # typing_extensions: a dependency of pydantic
WORKERS_RUNTIME = {"workers", "js", "pyodide", "asgi"}  # modules the Python Workers runtime provides
PYODIDE_PACKAGES = {
    # package dir -> third-party top-level modules and project modules it may import
    "archetype/world": (PYDANTIC, SHARED_CORE),
    "archetype/commands": (PYDANTIC, SHARED_CORE),
    "archetype/api": ({*PYDANTIC, "fastapi", "starlette"}, (*SHARED_CORE, "archetype.api")),
    "durable_world": ({*PYDANTIC, *WORKERS_RUNTIME}, (*SHARED_CORE, "durable_world")),
    "worker": ({*PYDANTIC, "fastapi", "starlette", *WORKERS_RUNTIME}, (*SHARED_CORE, "archetype.api", "durable_world", "worker")),
}
PROJECT_TOP_LEVEL = {"archetype", "local_catalog", "durable_world", "worker"}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(SRC).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.append((node.lineno, module))
    return found


def violations(package_dir: str) -> list[str]:
    third_party, project = PYODIDE_PACKAGES[package_dir]
    problems = []
    for path in sorted((SRC / package_dir).rglob("*.py")):
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            if top in PROJECT_TOP_LEVEL:
                ok = any(module == p or module.startswith(p + ".") for p in project)
            else:
                ok = (top in sys.stdlib_module_names and top != "sqlite3") or top in third_party or top == "__future__"
            if not ok:
                problems.append(f"{path.relative_to(SRC)}:{line} imports {module}")
    return problems


@pytest.mark.parametrize("package_dir", sorted(PYODIDE_PACKAGES))
def test_pyodide_code_imports_only_what_a_worker_has(package_dir):
    if not (SRC / package_dir).exists():
        pytest.skip(f"{package_dir} does not exist yet")
    assert violations(package_dir) == []


def test_the_contract_catches_a_forbidden_import(tmp_path, monkeypatch):
    bad = SRC / "archetype" / "world" / "_layering_probe.py"
    bad.write_text("import sqlite3\nfrom archetype.runtime import Runtime\nimport httpx\n")
    try:
        assert violations("archetype/world") == [
            "archetype/world/_layering_probe.py:1 imports sqlite3",
            "archetype/world/_layering_probe.py:2 imports archetype.runtime",
            "archetype/world/_layering_probe.py:3 imports httpx",
        ]
    finally:
        bad.unlink()


def test_importing_archetype_does_not_load_cpython_only_modules():
    import subprocess

    code = (
        "import sys, archetype, archetype.world, archetype.commands\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('local_catalog', 'httpx', 'pyiceberg', 'uvicorn', 'click', 'sqlite3')"
        " or m in ('archetype.runtime', 'archetype.cli', 'archetype.audit')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
