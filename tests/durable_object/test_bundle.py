"""The Worker bundle `wrangler deploy --dry-run` builds (offline): the Worker entry, the Durable
Object and the shared core, with the Worker's packages vendored for the Python Workers runtime
(python_modules/ from the Pyodide wheels of requirements-pyodide.lock), none of the CPython-only
code, within the Workers size limit; and on the real interpreter it imports and serves a request
on its own (rung 3: a Pyodide that sees the bundle and nothing of src/)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.pyodide.host import missing_setup, shared_host
from worker.stage import locked_packages, stage

ROOT = Path(__file__).resolve().parents[2]
CPYTHON_ONLY = (
    "archetype/runtime.py", "archetype/cli.py", "archetype/demo.py", "archetype/server.py", "archetype/stepper.py",
    "archetype/client.py", "archetype/client_cli.py", "archetype/remote.py", "archetype/audit", "local_catalog", "worker/stage.py",
)  # fmt: skip
CPYTHON_ONLY_IMPORTS = re.compile(r"^\s*(?:from|import)\s+(httpx|pyiceberg|uvicorn|sqlite3|click)\b", re.M)
CPYTHON_ONLY_PACKAGES = ("httpx", "uvicorn", "click", "pyiceberg", "pyarrow", "numpy", "local_catalog")
# import name -> distribution, for the packages the Worker's code imports (and the SDK's shim)
VENDORED = {
    "pydantic": "pydantic", "pydantic_core": "pydantic-core", "fastapi": "fastapi", "starlette": "starlette",
    "anyio": "anyio", "annotated_types": "annotated-types", "typing_inspection": "typing-inspection",
    "workers": "workers-runtime-sdk",
}  # fmt: skip
# Workers limits on the compressed upload (https://developers.cloudflare.com/workers/platform/limits/)
FREE_PLAN_GZIP_BYTES = 3_000_000
PAID_PLAN_GZIP_BYTES = 10_000_000

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("npx") is None, reason="npm/npx not installed"),
]


def wrangler_dry_run(out: Path, *config: str) -> str:
    """`wrangler deploy --dry-run` (its [build] command stages the bundle first); its output."""
    if not (ROOT / "node_modules" / ".bin" / "wrangler").exists():
        pytest.fail("wrangler is not installed: run `./dev setup` (npm ci from package-lock.json)")
    env = {**os.environ, "WRANGLER_SEND_METRICS": "false", "CI": "true", "NO_COLOR": "1"}
    run = subprocess.run(
        ["npx", "--no-install", "wrangler", "deploy", "--dry-run", "--outdir", str(out), *config],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "env.WORLDS (WorldObject)" in run.stdout and "env.AUDIT_QUEUE (archetype-audit)" in run.stdout
    return run.stdout


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("bundle")
    return out, wrangler_dry_run(out)


@pytest.fixture(scope="module")
def module_dry_run(tmp_path_factory, dry_run) -> tuple[Path, str]:
    """The dry run of a deployment that ships the user's module (docs/deployment.md, "The module
    hook"): wrangler.toml with `--module tests.server.game` on its build command, staged apart from
    build/worker. After `dry_run`: both stage python_modules/, which wrangler reads beside its config."""
    work = tmp_path_factory.mktemp("module-deploy")
    (work / "python_modules").symlink_to(ROOT / "python_modules")
    config = (ROOT / "wrangler.toml").read_text()
    for line, replaced in (
        ('main = "build/worker/worker/entry.py"', f'main = "{work}/worker/worker/entry.py"'),
        ('base_dir = "build/worker"', f'base_dir = "{work}/worker"'),
        ('command = "python3 src/worker/stage.py build/worker"',
         f'command = "python3 src/worker/stage.py {work}/worker --module tests.server.game"\ncwd = "{ROOT}"'),
        ('directory = "build/assets"', f'directory = "{ROOT}/build/assets"'),
    ):  # fmt: skip
        assert line in config, f"wrangler.toml no longer says {line}"
        config = config.replace(line, replaced)
    (work / "wrangler.toml").write_text(config)
    out = work / "out"
    return out, wrangler_dry_run(out, "--config", str(work / "wrangler.toml"))


@pytest.fixture(scope="module")
def bundle(dry_run) -> Path:
    return dry_run[0]


def project_modules(bundle: Path) -> set[str]:
    return {p.relative_to(bundle).as_posix() for p in bundle.rglob("*.py") if "python_modules" not in p.parts}


def test_bundle_holds_the_worker_the_durable_object_and_the_shared_core(bundle):
    found = project_modules(bundle)
    entry = (bundle / "entry.py").read_text()
    assert "class Default(WorkerEntrypoint)" in entry and "WorldObject" in entry
    for module in ("durable_world/world_object.py", "durable_world/port.py", "durable_world/delivery.py",
                   "archetype/world/world.py", "archetype/world/family.py", "archetype/commands/ledger.py",
                   "archetype/commands/ledger_sql.py", "archetype/canonical.py", "archetype/api/app.py"):  # fmt: skip
        assert module in found, f"{module} missing from the bundle"


def test_bundle_vendors_the_packages_for_the_runtimes_python(bundle):
    vendored = bundle / "python_modules"
    pins = locked_packages()
    for module, distribution in VENDORED.items():
        assert (vendored / module / "__init__.py").is_file(), f"{module} is not vendored"
        version = pins[distribution][0]
        assert (vendored / f"{distribution.replace('-', '_')}-{version}.dist-info").is_dir(), f"{distribution} is not {version}"
    assert (vendored / "asgi.py").is_file()  # the SDK's `import asgi` shim, which worker.entry uses
    # pydantic's compiled core is a WebAssembly module built for CPython 3.14 on Emscripten ...
    (native,) = (vendored / "pydantic_core").glob("_pydantic_core*.so")
    assert native.name == "_pydantic_core.cpython-314-wasm32-emscripten.so"
    assert native.read_bytes()[:4] == b"\0asm"
    # ... which is the Python that wrangler.toml's compatibility flag selects (pywrangler's table:
    # python_workers_20260610 -> Python 3.14, Pyodide 314)
    config = tomllib.loads((ROOT / "wrangler.toml").read_text())
    assert {"python_workers", "python_workers_20260610"} <= set(config["compatibility_flags"])


def test_bundle_holds_no_cpython_only_code(bundle):
    found = project_modules(bundle)
    leaked = sorted(m for m in found for banned in CPYTHON_ONLY if m == banned or m.startswith(banned + "/"))
    assert leaked == []
    importing = sorted(m for m in found if CPYTHON_ONLY_IMPORTS.search((bundle / m).read_text()))
    assert importing == []
    vendored = bundle / "python_modules"
    assert sorted(p for p in CPYTHON_ONLY_PACKAGES if (vendored / p).exists()) == []
    native = sorted(p.name for p in vendored.rglob("*.so") if "wasm32-emscripten" not in p.name)
    assert native == []  # no extension module built for a CPython platform
    assert list(bundle.rglob("*.pyc")) == []


def test_bundle_fits_the_workers_size_limit(dry_run):
    assert_fits(dry_run[1])


def assert_fits(stdout: str) -> None:
    sizes = re.search(r"Total Upload: ([\d.]+) KiB / gzip: ([\d.]+) KiB", stdout)
    assert sizes, stdout[-2000:]
    assert re.search(r"Vendored Modules\s*│\s*│\s*[\d.]+ KiB", stdout), "python_modules/ was not uploaded"
    gzip_bytes = float(sizes.group(2)) * 1024
    assert gzip_bytes < FREE_PLAN_GZIP_BYTES < PAID_PLAN_GZIP_BYTES
    print(f"bundle: {sizes.group(1)} KiB, {sizes.group(2)} KiB gzipped")


def test_a_bundle_staged_with_the_user_s_module_ships_it_and_its_imports_with_the_packages(module_dry_run):
    bundle, stdout = module_dry_run
    found = project_modules(bundle)
    # the module, what it imports (its components), and worker/modules.py handing it to every object
    assert {"tests/server/game.py", "tests/component_modules/alpha.py", "worker/modules.py"} <= found
    assert "import tests.server.game" in (bundle / "worker" / "modules.py").read_text()
    assert (bundle / "tests" / "server" / "game.py").read_bytes() == (ROOT / "tests" / "server" / "game.py").read_bytes()
    assert "tests/server/game.py" in stdout  # listed among the uploaded modules
    assert {"durable_world/world_object.py", "archetype/commands/clock.py", "entry.py"} <= found
    for module in VENDORED:
        assert (bundle / "python_modules" / module / "__init__.py").is_file(), f"{module} is not vendored"
    assert sorted(m for m in found if m.startswith("tests/") and m not in (
        "tests/__init__.py", "tests/server/__init__.py", "tests/server/game.py",
        "tests/component_modules/__init__.py", "tests/component_modules/alpha.py")) == []  # fmt: skip
    assert_fits(stdout)


def test_bundle_serves_a_request_on_pyodide_without_src(bundle):
    reason = missing_setup()
    if reason is not None:
        pytest.fail(reason)
    host = shared_host()
    host.boot("bundle", bundle=bundle)
    answer = host.call("tests.pyodide.harness:bundle_check", interpreter="bundle", bundle=str(bundle))
    assert answer["status"] == 201 and answer["body"]["world_id"] == "w-bundle", answer["body"]
    assert answer["entry_classes"] == [True, True]  # the SDK's WorkerEntrypoint and DurableObject
    assert answer["outside"] == []
    assert {"entry", "archetype", "durable_world", "pydantic", "fastapi", "workers"} <= set(answer["loaded_from_bundle"])


def test_the_dashboard_is_staged_as_static_assets_beside_the_worker(dry_run):
    config = tomllib.loads((ROOT / "wrangler.toml").read_text())
    assets = ROOT / config["assets"]["directory"] / "dashboard"
    served = ROOT / "src" / "archetype" / "dashboard" / "static"
    assert sorted(p.name for p in assets.iterdir()) == sorted(p.name for p in served.iterdir())  # serve's own files
    assert all((assets / p.name).read_bytes() == p.read_bytes() for p in served.iterdir())
    _, stdout = dry_run
    assert "dashboard" not in {p.name for p in dry_run[0].rglob("*")}  # assets travel apart from the Worker's modules


def test_the_users_module_is_staged_into_the_bundle_with_its_imports(tmp_path, monkeypatch):
    # `stage.py --module tests.server.game`, run from the project root as wrangler's build runs it
    monkeypatch.chdir(ROOT)
    out = tmp_path / "worker"
    stage(out, ["tests.server.game"])
    found = project_modules(out)
    assert {"tests/server/game.py", "tests/component_modules/alpha.py", "durable_world/edge.py"} <= found
    # game.py names archetype.runtime for the type checker only: the staged closure leaves it out
    assert sorted(m for m in found for banned in CPYTHON_ONLY if m == banned or m.startswith(banned + "/")) == []
    modules = (out / "worker" / "modules.py").read_text()
    assert "import tests.server.game" in modules and "MODULES = (tests.server.game, )" in modules
    with pytest.raises(SystemExit, match="no such module"):
        stage(tmp_path / "none", ["no_such_game"])
