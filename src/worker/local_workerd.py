"""The Worker on the real Workers runtime, locally and offline (tooling beside stage.py: the tests'
real-runtime fixture and `./dev edge-dev` use it; the Worker never imports it).

workerd starts a Python Worker only with its Pyodide bundle, which it downloads at start-up from a
host these machines cannot reach. `../shared/workerd-python/` beside the checkout holds that bundle
built offline (`pyodide_dev.capnp.bin`; its README says how), and package.json pins the workerd
release it matches (`workerd-python`: npm `@cloudflare/workerd-linux-64@1.20260822.1`). workerd
reads the bundle from a cache directory (`--pyodide-bundle-disk-cache-dir`) when the Worker's
compatibility flags select the development bundle (`LOCAL_FLAGS`, `LOCAL_COMPATIBILITY_DATE`):
only local runs set them; production keeps wrangler.toml's.

Two ways to run it:

- `LocalWorker(directory, ...).build()` stages the Worker into `directory` and writes a workerd
  config for it from wrangler.toml (`render_config`); `command()` is workerd's command line. The
  tests run this (tests/support/workerd/python_worker.py), for their own storage, port and restarts.
- `python3 src/worker/local_workerd.py edge-dev [--module M] [wrangler dev args]` (`./dev
  edge-dev`) runs `wrangler dev` with the local date and flags on the pinned workerd, through
  `MINIFLARE_WORKERD_PATH` and a launcher that adds the bundle cache to workerd's command line:
  wrangler's build step, its watch of src/, its local Durable Objects, queue and static assets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: stage.py is a sibling module
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.stage import MODULES_ENV, ROOT, stage, vendor

WORKERD = ROOT / "node_modules" / "workerd-python" / "bin" / "workerd"
WRANGLER_TOML = ROOT / "wrangler.toml"
BUNDLE_ENV = "ARCHETYPE_WORKERD_PYTHON_BUNDLE"
BUNDLE_NAME = "pyodide_dev.capnp.bin"
# The bundle workerd takes from the cache directory (never downloaded, never checked against a hash)
# is the "development" one. The newest Python flag in force picks the bundle, so the Python flag
# the date implies is switched off; the date is at most the bundle's workerd release.
LOCAL_FLAGS = ("python_workers_development", "no_python_workers_20250116")
LOCAL_COMPATIBILITY_DATE = "2026-08-22"
TOKENS_SECRET = "ARCHETYPE_TOKENS"
QUEUE_SERVICE = "audit-queue"
# workerd hands a queue binding's send() and sendBatch() to a service as HTTP requests to host
# "fake-host": POST /message (one body) and POST /batch, whose JSON body is {"messages": [{"body":
# <base64 of the serialised body: JSON text for contentType "json">, "contentType": ...}, ...]}
# (headers CF-Queue-Batch-Count, -Batch-Bytes, -Largest-Msg); a 200 answer must be JSON (the
# queue's metrics), anything else fails the send. This service takes them and drops them.
DROP_QUEUE_JS = """\
export default {
  async fetch(request) {
    await request.arrayBuffer();
    return Response.json({metadata: {metrics: {backlogCount: 0, backlogBytes: 0, oldestMessageTimestamp: 0}}});
  },
};
"""

Module = tuple[str, str, str]  # (module name, kind of module in workerd's config, file to embed)
Binding = tuple[str, str, str]  # (name, kind of binding, value)


class MissingRuntimeError(RuntimeError):
    """The pinned workerd or the offline bundle is not on this machine."""


def bundle_path() -> Path:
    """The offline Pyodide bundle: `$ARCHETYPE_WORKERD_PYTHON_BUNDLE`, else ../shared/workerd-python/
    beside this checkout, or beside the main checkout when this one is a git worktree."""
    named = os.environ.get(BUNDLE_ENV)
    if named:
        return Path(named)
    candidates = [ROOT.parent / "shared" / "workerd-python" / BUNDLE_NAME]
    main = _main_checkout(ROOT)
    if main is not None:
        candidates.append(main.parent / "shared" / "workerd-python" / BUNDLE_NAME)
    return next((path for path in candidates if path.is_file()), candidates[0])


def _main_checkout(root: Path) -> Path | None:
    """The main working tree of a git worktree (whose `.git` is a file naming its git directory)."""
    dot_git = root / ".git"
    if not dot_git.is_file():
        return None
    git_dir = Path(dot_git.read_text().removeprefix("gitdir:").strip())
    common = git_dir / "commondir"
    return (git_dir / common.read_text().strip()).resolve().parent if common.is_file() else None


def check_runtime() -> None:
    """Raise `MissingRuntimeError` (one line saying how to get it) unless the runtime can start here."""
    if not os.access(WORKERD, os.X_OK):
        raise MissingRuntimeError(f"{WORKERD} is missing: `./dev setup` installs it (package.json `workerd-python`)")
    if not bundle_path().is_file():
        raise MissingRuntimeError(
            f"workerd's Python bundle {bundle_path()} is missing: put {BUNDLE_NAME}, built offline, in "
            f"../shared/workerd-python/ beside the checkout (its README says how) or name it in {BUNDLE_ENV}"
        )


def fill_bundle_cache(cache: Path) -> Path:
    """`cache` holding the bundle, as `--pyodide-bundle-disk-cache-dir` expects it."""
    check_runtime()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / BUNDLE_NAME
    if not target.is_file() or target.stat().st_size != bundle_path().stat().st_size:
        shutil.copyfile(bundle_path(), target)
    return cache


@dataclass
class LocalWorker:
    """One local deployment in `directory`: the staged Worker (with the user's `modules`), its
    packages, the bundle cache and the workerd config. `tokens` is the ARCHETYPE_TOKENS secret (a
    token table or its JSON), `vars` override wrangler.toml's [vars], `port` 0 lets workerd choose,
    `queue_address` ("127.0.0.1:PORT") is an HTTP service that gets the audit queue's sends (see
    DROP_QUEUE_JS; None: they are dropped), `main` a file that replaces wrangler's main module (its
    imports must be in the staged Worker, whose own entry stays beside it as `worker.entry`)."""

    directory: Path
    modules: Sequence[str] = ()
    tokens: Mapping[str, object] | str = field(default_factory=dict)
    vars: Mapping[str, object] = field(default_factory=dict)
    port: int = 0
    storage: Path | None = None
    queue_address: str | None = None
    main: Path | None = None
    wrangler_toml: Path = WRANGLER_TOML

    @property
    def config(self) -> Path:
        return self.directory / "workerd.capnp"

    @property
    def worker(self) -> Path:
        return self.directory / "worker"

    @property
    def python_modules(self) -> Path:
        return self.directory / "python_modules"

    @property
    def bundle_cache(self) -> Path:
        return self.directory / "pyodide-bundle-cache"

    @property
    def storage_dir(self) -> Path:
        """The Durable Objects' SQLite files: kept across restarts, as an object's storage outlives its isolate."""
        return self.storage or self.directory / "storage"

    def build(self) -> Path:
        """Stage the Worker and its packages, fill the bundle cache, write the config; its path."""
        fill_bundle_cache(self.bundle_cache)
        with contextlib.chdir(ROOT):  # `--module` names are found under src/ or the project root, as wrangler's build runs
            stage(self.worker, self.modules)
        vendor(self.python_modules)
        if self.main is not None:
            shutil.copyfile(self.main, self.worker / self.main.name)
        self.storage_dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(self.render())
        return self.config

    def render(self) -> str:
        wrangler = tomllib.loads(self.wrangler_toml.read_text())
        main = Path(self.main.name) if self.main else Path(wrangler["main"]).relative_to(wrangler["base_dir"])
        return render_config(
            modules=bundle_modules(self.worker, main, self.python_modules, relative_to=self.directory),
            bindings=worker_bindings(wrangler, tokens=self.tokens, overrides=self.vars),
            namespaces=[(b["name"], b["class_name"]) for b in wrangler["durable_objects"]["bindings"]],
            queues=[producer["binding"] for producer in wrangler.get("queues", {}).get("producers", [])],
            storage=self.storage_dir, port=self.port, queue_address=self.queue_address,
        )  # fmt: skip

    def command(self, *options: str) -> list[str]:
        """workerd's command line for this deployment (`options` go before the config file)."""
        return [str(WORKERD), "serve", "--experimental", f"--pyodide-bundle-disk-cache-dir={self.bundle_cache}",
                *options, str(self.config)]  # fmt: skip


def bundle_modules(worker: Path, main: Path, python_modules: Path, *, relative_to: Path) -> list[Module]:
    """Every file of the staged Worker and its packages as wrangler uploads them: the main module
    (`main`, relative to `worker`) first and named by its file name, the rest by their paths, the
    packages under `python_modules/`; `.py` files as `pythonModule`, others as `data` but the
    Workers SDK's JavaScript, which its Python imports as an `esModule`. Paths are relative to
    `relative_to`, the config's directory."""
    if not (worker / main).is_file():
        raise MissingRuntimeError(f"{worker} holds no {main}: stage the Worker first (src/worker/stage.py)")
    found = [(main.name, "pythonModule", os.path.relpath(worker / main, relative_to))]
    for base, prefix in ((worker, ""), (python_modules, "python_modules/")):
        for path in sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            name = prefix + path.relative_to(base).as_posix()
            if path != worker / main:
                found.append((name, _module_kind(name), os.path.relpath(path, relative_to)))
    return found


def _module_kind(name: str) -> str:
    if name.endswith(".py"):
        return "pythonModule"
    if name.startswith("python_modules/workers/") and name.endswith((".js", ".mjs")):
        return "esModule"
    return "data"


def worker_bindings(wrangler: Mapping[str, object], *, tokens: Mapping[str, object] | str,
                    overrides: Mapping[str, object]) -> list[Binding]:  # fmt: skip
    """The Worker's plain bindings: wrangler.toml's [vars] with `overrides` on top (strings as `text`,
    anything else as `json`, as wrangler binds them) and the token table as the ARCHETYPE_TOKENS
    secret (a `text` binding, as a secret is)."""
    declared = wrangler.get("vars", {})
    values = {**(declared if isinstance(declared, dict) else {}), **overrides}
    found = [(name, "text", value) if isinstance(value, str) else (name, "json", json.dumps(value))
             for name, value in values.items()]  # fmt: skip
    found.append((TOKENS_SECRET, "text", tokens if isinstance(tokens, str) else json.dumps(tokens)))
    return found


def capnp_text(value: str) -> str:
    """A Cap'n Proto text-format string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c >= " " else f"\\x{ord(c):02x}" for c in escaped) + '"'


def render_config(*, modules: Sequence[Module], bindings: Sequence[Binding], namespaces: Sequence[tuple[str, str]],
                  queues: Sequence[str], storage: Path, port: int, queue_address: str | None) -> str:  # fmt: skip
    """workerd's config (Cap'n Proto text) for the Worker: its modules, the local compatibility
    date and flags, each Durable Object namespace (binding name, class) with SQLite storage on
    local disk, each queue producer binding, and one HTTP socket on 127.0.0.1:`port`."""
    q = capnp_text
    module_list = ",\n    ".join(f"(name = {q(name)}, {kind} = embed {q(path)})" for name, kind, path in modules)
    binding_list = [f"(name = {q(name)}, {kind} = {q(value)})" for name, kind, value in bindings]
    binding_list += [f"(name = {q(name)}, durableObjectNamespace = {q(cls)})" for name, cls in namespaces]
    binding_list += [f'(name = {q(name)}, queue = "{QUEUE_SERVICE}")' for name in queues]
    classes = ", ".join(f"(className = {q(cls)}, uniqueKey = {q('archetype-' + cls)}, enableSql = true)"
                        for _, cls in namespaces)  # fmt: skip
    if queue_address is None:
        queue_service = f'(name = "{QUEUE_SERVICE}", worker = (modules = [(name = "drop.js", esModule = {q(DROP_QUEUE_JS)})], compatibilityDate = "{LOCAL_COMPATIBILITY_DATE}"))'  # noqa: E501
    else:
        queue_service = f'(name = "{QUEUE_SERVICE}", external = (address = {q(queue_address)}, http = ()))'
    bindings_text = ",\n    ".join(binding_list)
    return f"""\
# Written by src/worker/local_workerd.py from wrangler.toml and the staged Worker: the Worker in the
# real Workers runtime on 127.0.0.1, with the offline Pyodide bundle (the local flags only).
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    (name = "storage", disk = (path = {q(str(storage.resolve()))}, writable = true)),
    {queue_service},
  ],
  sockets = [(name = "http", address = "127.0.0.1:{port}", http = (), service = "main")],
);

const worker :Workerd.Worker = (
  modules = [
    {module_list}
  ],
  compatibilityDate = "{LOCAL_COMPATIBILITY_DATE}",
  compatibilityFlags = [{", ".join(q(flag) for flag in LOCAL_FLAGS)}],
  durableObjectNamespaces = [{classes}],
  durableObjectStorage = (localDisk = "storage"),
  bindings = [
    {bindings_text}
  ],
);
"""


# -- wrangler dev on the pinned workerd (`./dev edge-dev`) -------------------------------------

EDGE_DEV_DIR = ROOT / "build" / "edge-dev"


def write_launcher(directory: Path) -> Path:
    """DIR/workerd: the pinned workerd given the bundle cache, for `MINIFLARE_WORKERD_PATH` (wrangler
    dev starts workerd itself and has no option for the cache directory)."""
    cache = fill_bundle_cache(directory / "pyodide-bundle-cache")
    launcher = directory / "workerd"
    launcher.write_text(f'#!/bin/sh\nexec {shlex.quote(str(WORKERD))} "$@" '
                        f"--pyodide-bundle-disk-cache-dir={shlex.quote(str(cache.resolve()))}\n")  # fmt: skip
    launcher.chmod(0o755)
    return launcher


def wrangler_dev_options() -> list[str]:
    """`wrangler dev`'s options that select the offline bundle in place of wrangler.toml's date and flags."""
    options = ["--compatibility-date", LOCAL_COMPATIBILITY_DATE]
    for flag in LOCAL_FLAGS:
        options += ["--compatibility-flags", flag]
    return options


def tokens_env_file(tokens: str, directory: Path) -> Path:
    """The token table from the environment as a dotenv file for `wrangler dev --env-file` (which
    then reads it in place of .dev.vars), readable by this user only."""
    if "'" in tokens or "$" in tokens:
        raise MissingRuntimeError(f"{TOKENS_SECRET} holds ' or $, which a dotenv file cannot carry as is; put it in .dev.vars")
    path = directory / "secrets.env"
    path.touch(mode=0o600)
    path.write_text(f"{TOKENS_SECRET}='{tokens}'\n")
    return path


def edge_dev(modules: Sequence[str], wrangler_args: Sequence[str]) -> None:
    """Run `wrangler dev` (its build step, watch of src/, local Durable Objects, queue and assets)
    on the pinned workerd with the offline bundle: the user's `modules` staged into the Worker,
    the token table from $ARCHETYPE_TOKENS, else .dev.vars. Replaces this process."""
    EDGE_DEV_DIR.mkdir(parents=True, exist_ok=True)
    bin_dir = ROOT / "node_modules" / ".bin"  # wrangler, and the Node it needs (package.json's node-*)
    env = {**os.environ, "MINIFLARE_WORKERD_PATH": str(write_launcher(EDGE_DEV_DIR)),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           # offline: no fetch of the `Request.cf` object from workers.cloudflare.com (a placeholder serves)
           "CLOUDFLARE_CF_FETCH_ENABLED": os.environ.get("CLOUDFLARE_CF_FETCH_ENABLED", "false")}  # fmt: skip
    env[MODULES_ENV] = " ".join([*os.environ.get(MODULES_ENV, "").split(), *modules])
    options = wrangler_dev_options()
    if os.environ.get(TOKENS_SECRET):
        options += ["--env-file", str(tokens_env_file(os.environ[TOKENS_SECRET], EDGE_DEV_DIR))]
    elif not (ROOT / ".dev.vars").is_file():
        print(f"edge-dev: no {TOKENS_SECRET} in the environment and no .dev.vars: every request but /health "
              f"will be refused (docs/deployment.md, Local sessions)", file=sys.stderr)  # fmt: skip
    dev = tomllib.loads(WRANGLER_TOML.read_text()).get("dev", {})
    print(f"edge-dev: http://{_option(wrangler_args, '--ip', dev.get('ip', '127.0.0.1'))}:"
          f"{_option(wrangler_args, '--port', dev.get('port', 8787))} (workerd {workerd_version()} with "
          f"the offline Pyodide bundle; the Worker restarts when src/ changes)", flush=True)  # fmt: skip
    wrangler = bin_dir / "wrangler"
    os.chdir(ROOT)
    os.execve(wrangler, [str(wrangler), "dev", *options, *wrangler_args], env)


def workerd_version() -> str:
    package = json.loads((WORKERD.parents[1] / "package.json").read_text())
    return str(package["version"])


def _option(args: Sequence[str], name: str, default: object) -> object:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The Worker on the pinned workerd with the offline Pyodide bundle.")
    commands = parser.add_subparsers(dest="command", required=True)
    dev = commands.add_parser("edge-dev", help="wrangler dev on it (./dev edge-dev); other arguments go to wrangler dev")
    dev.add_argument("--module", action="append", default=[], dest="modules",
                     help="a module of the user's components and edge-hosted worlds, staged into the Worker (repeatable)")  # fmt: skip
    arguments, wrangler_args = parser.parse_known_args(argv)
    try:
        edge_dev(arguments.modules, wrangler_args)
    except MissingRuntimeError as exc:
        raise SystemExit(f"edge-dev: {exc}") from None


if __name__ == "__main__":
    main()
