"""Stage the Worker for wrangler (run by wrangler.toml's [build] command): its modules and its packages.

Modules: wrangler uploads every .py under `base_dir`, and src/ also holds the CPython-only code
(runtime, CLI, local server, HTTP client, Iceberg projector, local catalog). So the Worker is
staged instead: the module-level import closure of `worker.entry`, copied with the src/ layout
into the output directory. Imports inside functions are not followed: in this code base they are
the lazy doors to CPython-only modules (for example `archetype.Runtime`).

The user's modules (the module hook of docs/deployment.md, the same modules `archetype serve
--module` imports): `--module NAME` (repeatable) stages each named module's import closure too,
found under src/ or the working directory as `serve` finds it, and writes the bundle's
worker/modules.py to import them, so the Durable Objects run their components and processors.
`$ARCHETYPE_STAGE_MODULES` (names separated by spaces) adds modules to those: `./dev edge-dev
--module M` sets it for wrangler dev's runs of the [build] command.

Packages: a Python Worker gets its third-party packages from `python_modules/` beside
wrangler.toml, a site-packages tree that wrangler uploads with the bundle (the directory
`pywrangler sync` fills). Here it is unpacked from the pinned, hashed Pyodide wheels of
requirements-pyodide.lock, which `./dev setup` downloads into .pyodide-wheels/.

    python3 src/worker/stage.py build/worker [--module game ...]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shutil
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

SRC = Path(__file__).resolve().parents[1]
ROOT = SRC.parent
ENTRY = "worker.entry"
LOCK = ROOT / "requirements-pyodide.lock"
WHEELS = ROOT / ".pyodide-wheels"
VENDOR = ROOT / "python_modules"
ASSETS = ROOT / "build" / "assets"
DASHBOARD = SRC / "archetype" / "dashboard" / "static"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


MODULES_FILE = Path("worker") / "modules.py"
MODULES_ENV = "ARCHETYPE_STAGE_MODULES"


def module_file(name: str, roots: Sequence[Path] = (SRC,)) -> tuple[Path, Path] | None:
    """(root, file) of the module `name` under the first root that has it."""
    for root in roots:
        path = root.joinpath(*name.split("."))
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate.is_file():
                return root, candidate
    return None


def _type_checking_only(node: ast.stmt | ast.ExceptHandler) -> bool:
    """`if TYPE_CHECKING:`: imports for the type checker, which never run."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level(body: Sequence[ast.stmt | ast.ExceptHandler]) -> Iterator[ast.stmt | ast.ExceptHandler]:
    """Statements that run at import time: the body, into if/try/with/class blocks, not functions."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or _type_checking_only(node):
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


def closure(root: str, roots: Sequence[Path] = (SRC,)) -> dict[str, tuple[Path, Path]]:
    """module name -> (root, file) of every module `root` imports at module level, itself included."""
    found: dict[str, tuple[Path, Path]] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ first
            prefix = ".".join(parts[:depth])
            located = module_file(prefix, roots)
            if located is None or prefix in found:
                continue
            found[prefix] = located
            todo.extend(imported_names(prefix, located[1]))
    return found


def locked_packages(lock: Path = LOCK) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, accepted sha256 digests) of every pin in a `pip --require-hashes` lock."""
    packages: dict[str, tuple[str, set[str]]] = {}
    name = None
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        pin = _PIN.match(line)
        if pin:
            name = re.sub(r"[-_.]+", "-", pin.group(1)).lower()
            packages[name] = (pin.group(2), set())
        if name is not None:
            packages[name][1].update(_HASH.findall(line))
    return packages


def locked_wheels(lock: Path = LOCK, wheels: Path = WHEELS) -> list[Path]:
    """The wheel of every locked package in `wheels`, each checked against its locked hashes."""
    by_digest = {hashlib.sha256(path.read_bytes()).hexdigest(): path for path in sorted(wheels.glob("*.whl"))}
    found, missing = [], []
    for name, (version, digests) in sorted(locked_packages(lock).items()):
        match = [by_digest[d] for d in digests if d in by_digest]
        if not match:
            missing.append(f"{name}=={version}")
            continue
        found.append(match[0])
    if missing:
        raise SystemExit(f"{wheels} lacks the locked wheels of {', '.join(missing)}: run ./dev setup")
    return found


def unpack(wheels: list[Path], target: Path) -> int:
    """Install wheels into a site-packages directory the way an installer lays them out (no
    scripts, no byte code); return the number of files written."""
    count = 0
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                name = member.filename
                head, _, rest = name.partition("/")
                if head.endswith(".data"):
                    scheme, _, rest = rest.partition("/")
                    if scheme not in ("purelib", "platlib"):
                        raise SystemExit(f"{wheel.name}: {scheme} files cannot be installed into a Worker")
                    name = rest
                if member.is_dir() or not name:
                    continue
                destination = target / name
                if not destination.resolve().is_relative_to(target.resolve()):
                    raise SystemExit(f"{wheel.name}: {member.filename} escapes the install directory")
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(archive.read(member))
                count += 1
    return count


def vendor(target: Path = VENDOR, lock: Path = LOCK, wheels: Path = WHEELS) -> int:
    wheel_files = locked_wheels(lock, wheels)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    return unpack(wheel_files, target)


def modules_source(modules: Sequence[str]) -> str:
    """The bundle's worker/modules.py: imports the user's modules and lists them."""
    lines = ['"""The modules of the user\'s code this bundle was staged with (written by src/worker/stage.py)."""', ""]
    lines += [f"import {name}" for name in modules]
    lines += ["", f"MODULES = ({''.join(f'{name}, ' for name in modules)})", ""]
    return "\n".join(lines)


def stage(out: Path, modules: Sequence[str] = ()) -> list[Path]:
    roots = (SRC, Path.cwd())
    found = closure(ENTRY)
    for name in modules:
        if module_file(name, roots) is None:
            raise SystemExit(f"--module {name}: no such module under {SRC} or {Path.cwd()}")
        found.update(closure(name, roots))
    if out.exists():
        shutil.rmtree(out)
    copied = []
    for root, path in sorted(set(found.values())):
        target = out / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied.append(target)
    (out / MODULES_FILE).write_text(modules_source(modules))
    return copied


def stage_assets(out: Path = ASSETS) -> int:
    """The dashboard's static files, served beside the Worker by Workers static assets at /dashboard/
    (wrangler.toml [assets]); the same files `archetype serve` mounts there. Returns the file count."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(DASHBOARD, out / "dashboard")
    return sum(1 for path in out.rglob("*") if path.is_file())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Stage the Worker bundle for wrangler.")
    parser.add_argument("out", nargs="?", default="build/worker", type=Path)
    parser.add_argument("--module", action="append", default=[], dest="modules",
                        help="a module of the user's components and setup(runtime) hook (repeatable)")  # fmt: skip
    arguments = parser.parse_args()
    destination = arguments.out
    modules = list(dict.fromkeys([*arguments.modules, *os.environ.get(MODULES_ENV, "").split()]))
    staged = stage(destination, modules)
    files = vendor()
    assets = stage_assets()
    print(f"staged {len(staged)} modules of {ENTRY} into {destination}, {files} package files into {VENDOR} "
          f"and {assets} dashboard files into {ASSETS}")  # fmt: skip
