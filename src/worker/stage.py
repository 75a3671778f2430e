"""Stage the Worker's Python modules for wrangler (run by wrangler.toml's [build] command).

wrangler uploads every .py under `base_dir`, and src/ also holds the CPython-only code (runtime,
CLI, local server, HTTP client, Iceberg projector, local catalog). So the Worker is staged
instead: the module-level import closure of `worker.entry`, copied with the src/ layout into the
output directory. Imports inside functions are not followed: in this code base they are the lazy
doors to CPython-only modules (for example `archetype.Runtime`).

    python3 src/worker/stage.py build/worker
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1]
ENTRY = "worker.entry"


def module_file(name: str) -> Path | None:
    path = SRC.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_level(body: list[ast.stmt]):
    """Statements that run at import time: the body, into if/try/with/class blocks, not functions."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _module_level([c for c in children if isinstance(c, ast.stmt | ast.ExceptHandler)])


def imported_names(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in _module_level(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.ExceptHandler):
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def closure(root: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ first
            prefix = ".".join(parts[:depth])
            path = module_file(prefix)
            if path is None or prefix in found:
                continue
            found[prefix] = path
            todo.extend(imported_names(prefix, path))
    return found


def stage(out: Path) -> list[Path]:
    if out.exists():
        shutil.rmtree(out)
    copied = []
    for path in sorted(closure(ENTRY).values()):
        target = out / path.relative_to(SRC)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied.append(target)
    return copied


if __name__ == "__main__":
    destination = Path(sys.argv[1] if len(sys.argv) > 1 else "build/worker")
    staged = stage(destination)
    print(f"staged {len(staged)} modules of {ENTRY} into {destination}")
