"""The workerd config src/worker/local_workerd.py writes for the staged Worker, and what the
real-runtime tests do where the runtime is missing: no workerd needed here."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.support.workerd import python_worker
from worker import local_workerd
from worker.local_workerd import LOCAL_FLAGS, WRANGLER_TOML, LocalWorker, bundle_modules, capnp_text, worker_bindings


@pytest.fixture
def staged(tmp_path):
    """A staged bundle's shape, without staging: the entry, a package, the SDK's JavaScript, a wheel's files."""
    files = ["worker/worker/entry.py", "worker/worker/__init__.py", "worker/archetype/__init__.py",
             "python_modules/workers/__init__.py", "python_modules/workers/workflows.js",
             "python_modules/pydantic_core/_pydantic_core.cpython-314-wasm32-emscripten.so",
             "python_modules/pydantic-2.0.dist-info/METADATA", "worker/archetype/__pycache__/x.cpython-311.pyc"]  # fmt: skip
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    return tmp_path


def test_every_file_of_the_bundle_is_a_module_as_wrangler_uploads_it(staged):
    modules = bundle_modules(staged / "worker", Path("worker/entry.py"), staged / "python_modules",
                             relative_to=staged)  # fmt: skip
    assert modules[0] == ("entry.py", "pythonModule", "worker/worker/entry.py")  # the main module, at the root
    assert sorted(modules[1:]) == [
        ("archetype/__init__.py", "pythonModule", "worker/archetype/__init__.py"),
        ("python_modules/pydantic-2.0.dist-info/METADATA", "data", "python_modules/pydantic-2.0.dist-info/METADATA"),
        ("python_modules/pydantic_core/_pydantic_core.cpython-314-wasm32-emscripten.so", "data",
         "python_modules/pydantic_core/_pydantic_core.cpython-314-wasm32-emscripten.so"),
        ("python_modules/workers/__init__.py", "pythonModule", "python_modules/workers/__init__.py"),
        ("python_modules/workers/workflows.js", "esModule", "python_modules/workers/workflows.js"),
        ("worker/__init__.py", "pythonModule", "worker/worker/__init__.py"),
    ]  # fmt: skip


def test_vars_come_from_wrangler_toml_with_overrides_and_the_tokens_are_a_text_secret():
    wrangler = {"vars": {"TICK_INTERVAL_MS": "1000", "KEEP_TICKS": 5, "PRUNE_LIMIT": "10"}}
    found = worker_bindings(wrangler, tokens={"t": {"principal": "p", "roles": ["admin"]}},
                            overrides={"TICK_INTERVAL_MS": "250"})  # fmt: skip
    assert found == [
        ("TICK_INTERVAL_MS", "text", "250"),
        ("KEEP_TICKS", "json", "5"),
        ("PRUNE_LIMIT", "text", "10"),
        ("ARCHETYPE_TOKENS", "text", '{"t": {"principal": "p", "roles": ["admin"]}}'),
    ]


def test_the_config_names_wrangler_toml_s_bindings_with_the_local_flags_only(staged):
    text = LocalWorker(staged, tokens='{"a": "b\\"c"}', port=0).render()
    wrangler = tomllib.loads(WRANGLER_TOML.read_text())
    assert f'compatibilityFlags = [{", ".join(capnp_text(flag) for flag in LOCAL_FLAGS)}]' in text
    for flag in wrangler["compatibility_flags"]:  # production's flags stay in wrangler.toml
        assert capnp_text(flag) not in text
    assert '(name = "WORLDS", durableObjectNamespace = "WorldObject")' in text
    assert '(className = "WorldObject", uniqueKey = "archetype-WorldObject", enableSql = true)' in text
    assert '(name = "AUDIT_QUEUE", queue = "audit-queue")' in text
    assert 'durableObjectStorage = (localDisk = "storage")' in text
    assert '(name = "ARCHETYPE_TOKENS", text = "{\\"a\\": \\"b\\\\\\"c\\"}")' in text
    assert 'address = "127.0.0.1:0"' in text


def test_capnp_strings_escape_quotes_backslashes_and_control_characters():
    assert capnp_text('a"b\\c\nd\u00e9') == '"a\\"b\\\\c\\x0ad\u00e9"'


@pytest.mark.parametrize("ci", ["true", None])
def test_without_the_bundle_the_real_runtime_tests_skip_in_one_line_or_fail_under_ci(monkeypatch, tmp_path, ci):
    monkeypatch.setenv(local_workerd.BUNDLE_ENV, str(tmp_path / "nowhere.capnp.bin"))
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
        with pytest.raises(pytest.skip.Exception, match="shared/workerd-python") as skipped:
            python_worker.require_runtime()
        assert "\n" not in str(skipped.value)
    else:
        monkeypatch.setenv("CI", ci)
        with pytest.raises(pytest.fail.Exception, match="cannot run: workerd's Python bundle"):
            python_worker.require_runtime()


def test_the_bundle_is_found_beside_the_main_checkout_of_a_worktree(tmp_path, monkeypatch):
    main = tmp_path / "main"
    (main / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (main / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    tree = tmp_path / "wt" / "mine"
    tree.mkdir(parents=True)
    (tree / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'wt'}\n")
    bundle = tmp_path / "shared" / "workerd-python" / local_workerd.BUNDLE_NAME
    bundle.parent.mkdir(parents=True)
    bundle.write_text("")
    monkeypatch.delenv(local_workerd.BUNDLE_ENV, raising=False)
    monkeypatch.setattr(local_workerd, "ROOT", tree)
    assert local_workerd.bundle_path() == bundle
