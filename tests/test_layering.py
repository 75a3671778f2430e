"""The layering contract: code that runs in a Cloudflare Worker (Pyodide) imports only the
standard library, pydantic, the HTTP framework and the Workers runtime, and never the CPython-only
parts of the project (runtime, CLI, local catalog, audit projector, HTTP client, local server); and
no project module imports, at its top or inside a function, one that imports it back."""

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


def imported_modules(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """What `path` imports anywhere in it (inside a function too), as (line, module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(src).with_suffix("").parts[:-1])
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


def project_modules(src: Path) -> dict[str, Path]:
    """Every module of the project's packages under `src`, by dotted name (a package by its own)."""
    modules = {}
    for top in sorted(PROJECT_TOP_LEVEL):
        for path in sorted((src / top).rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_graph(src: Path) -> dict[str, set[str]]:
    """Project module -> the project modules it imports, at its top or inside a function. `from
    package import name` is an import of the submodule when `name` is one, else of the package.
    (Importing a submodule runs its package's __init__ first; that is no edge here, or every
    package re-exporting its submodules would be a circle.)"""
    modules = project_modules(src)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        graph[name] = {module for module in found if module in modules and module != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of the graph: its strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_no_module_imports_one_that_imports_it_back():
    """A circle of imports means the modules own one thing between them (split it: the owner of
    what both need gets a module of its own), and an import moved into a function to dodge it
    still is one."""
    assert import_circles(import_graph(SRC)) == []


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    package = tmp_path / "archetype" / "probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from archetype.probe.a import A\n")
    (package / "a.py").write_text("from archetype.probe import b\nA = 1\n")
    (package / "b.py").write_text("def late():\n    from .c import C\n")
    (package / "c.py").write_text("import archetype.probe.a\nC = 1\n")
    (package / "d.py").write_text("from archetype.probe import A\n")  # the package only: no circle
    graph = import_graph(tmp_path)
    assert graph["archetype.probe.b"] == {"archetype.probe.c"}
    assert import_circles(graph) == [["archetype.probe.a", "archetype.probe.b", "archetype.probe.c"]]
