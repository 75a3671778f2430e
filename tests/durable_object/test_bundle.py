"""The Worker bundle `wrangler deploy --dry-run` builds (offline): it holds the Worker entry, the
Durable Object and the shared core, none of the CPython-only code, and imports on its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPYTHON_ONLY = (
    "archetype/runtime.py", "archetype/cli.py", "archetype/demo.py", "archetype/server.py",
    "archetype/client.py", "archetype/remote.py", "archetype/audit", "local_catalog", "worker/stage.py",
)  # fmt: skip
CPYTHON_ONLY_IMPORTS = re.compile(r"^\s*(?:from|import)\s+(httpx|pyiceberg|uvicorn|sqlite3|click)\b", re.M)

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("npx") is None or shutil.which("node") is None, reason="node/npx not installed"),
]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    if not (ROOT / "node_modules" / ".bin" / "wrangler").exists():
        pytest.fail("wrangler is not installed: run `./dev setup` (npm ci from package-lock.json)")
    out = tmp_path_factory.mktemp("bundle")
    env = {**os.environ, "WRANGLER_SEND_METRICS": "false", "CI": "true", "NO_COLOR": "1"}
    run = subprocess.run(
        ["npx", "--no-install", "wrangler", "deploy", "--dry-run", "--outdir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "env.WORLDS (WorldObject)" in run.stdout and "env.AUDIT_QUEUE (archetype-audit)" in run.stdout
    return out


def modules(bundle: Path) -> set[str]:
    return {p.relative_to(bundle).as_posix() for p in bundle.rglob("*.py")}


def test_bundle_holds_the_worker_the_durable_object_and_the_shared_core(bundle):
    found = modules(bundle)
    entry = (bundle / "entry.py").read_text()
    assert "class Default(WorkerEntrypoint)" in entry and "WorldObject" in entry
    for module in ("durable_world/world_object.py", "durable_world/port.py", "durable_world/delivery.py",
                   "archetype/world/world.py", "archetype/world/family.py", "archetype/commands/ledger.py",
                   "archetype/commands/ledger_sql.py", "archetype/canonical.py", "archetype/api/app.py"):  # fmt: skip
        assert module in found, f"{module} missing from the bundle"


def test_bundle_holds_no_cpython_only_code(bundle):
    found = modules(bundle)
    leaked = sorted(m for m in found for banned in CPYTHON_ONLY if m == banned or m.startswith(banned + "/"))
    assert leaked == []
    importing = sorted(m for m in found if CPYTHON_ONLY_IMPORTS.search((bundle / m).read_text()))
    assert importing == []


def test_bundle_imports_without_the_rest_of_src(bundle):
    """Import the entry from the bundle alone (site-packages give pydantic/fastapi, as vendoring
    would): every project module must come from the bundle, none of the CPython-only ones load."""
    script = textwrap.dedent(
        f"""
        import sys
        src = {str(ROOT / "src")!r}
        sys.path[:] = [p for p in sys.path if not p.startswith(src)]
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
        sys.path.insert(0, {str(bundle)!r})
        import entry

        class Env:
            WORLDS = object()
            ARCHETYPE_TOKENS = '{{"t": {{"principal": "p", "roles": ["player"]}}}}'

        app = entry.build_app(Env())
        assert any(getattr(r, "path", "") == "/worlds/{{world_id}}/commands" for r in app.routes)
        loaded = {{n: getattr(m, "__file__", None) or "" for n, m in list(sys.modules.items())}}
        outside = sorted(n for n, f in loaded.items() if f.startswith(src))
        banned = sorted(n for n in loaded if n.split(".")[0] in ("httpx", "pyiceberg", "uvicorn", "sqlite3",
                        "click", "local_catalog") or n in ("archetype.runtime", "archetype.cli", "archetype.audit"))
        print("outside:", outside, "banned:", banned)
        assert not outside and not banned
        """
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=bundle, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
