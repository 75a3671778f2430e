"""The code blocks of README.md, docs/*.md and docs/guide/*.md, run as tests by Sybil (the rule is
docs/testing.md, "Docs"): each document is one namespace, run top to bottom in a fresh temporary
directory, with one event loop for its top-level `await`s; `sh` blocks run in bash there. A
document sees only the component classes it defines (and archetype's own), as in a fresh process."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from archetype.world import components as _components

ROOT = Path(__file__).resolve().parent
SHELL_TIMEOUT_S = 120
HOW_TO_AWAIT = "python -m asyncio"  # the REPL where top-level `await` works, as in these blocks
INFO = re.compile(r"(?P<language>[^\s`]*)[ \t]*(?P<options>[^\n]*)$\n", re.MULTILINE)


def run_python(example: Example) -> None:
    namespace = example.namespace
    options = example.region.lexemes["options"].split()
    source = str(example.parsed)
    target = next((option.removeprefix("file=") for option in options if option.startswith("file=")), None)
    if target is not None:  # a module the document's later blocks (or a server it starts) import
        Path(target).write_text(source)
        return
    # the block's lines keep their line numbers in the document, so a traceback points into it
    code = compile("\n" * example.line + source, example.path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                   dont_inherit=True)  # fmt: skip
    if "no-run" in options:
        return
    if code.co_flags & inspect.CO_COROUTINE:
        if HOW_TO_AWAIT not in example.document.text[: example.region.start]:
            # a reader pasting this into `python` or a script gets "'await' outside function"
            raise AssertionError(f"this block uses top-level await: say before it how to run it ({HOW_TO_AWAIT!r}, "
                                 "or asyncio.run in a script)")
        namespace["__loop__"].run_until_complete(eval(code, namespace))
    else:
        exec(code, namespace)


def run_shell(example: Example) -> None:
    with tempfile.TemporaryFile("w+") as output:
        # its own process group, so anything it leaves running in the background is stopped with the document
        process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", str(example.parsed)], stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True, env=example.namespace["__env__"])  # fmt: skip
        example.namespace["__groups__"].append(process.pid)
        try:
            code = process.wait(SHELL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        output.seek(0)
        if code != 0:
            raise AssertionError(f"exit {code}:\n{output.read()}")


def parse_json(example: Example) -> None:
    json.loads(str(example.parsed))


def parse_toml(example: Example) -> None:
    tomllib.loads(str(example.parsed))


def shown_only(example: Example) -> None:
    return None


EVALUATORS: dict[str, Callable[[Example], None]] = {
    "python": run_python, "sh": run_shell, "bash": run_shell, "json": parse_json, "toml": parse_toml,
    **dict.fromkeys(["console", "text", "http", "js", "javascript", "sql"], shown_only),
}  # fmt: skip


def unknown_language(example: Example) -> None:
    language = example.region.lexemes["language"] or "(none)"
    raise AssertionError(f"fence language {language!r} is none of docs/testing.md's: {', '.join(EVALUATORS)}")


def fences(document: Document) -> Iterable[Region]:
    for region in RawFencedCodeBlockLexer(info_pattern=INFO)(document):
        region.parsed = region.lexemes["source"]
        region.evaluator = EVALUATORS.get(region.lexemes["language"], unknown_language)
        yield region


def setup(namespace: dict[str, Any]) -> None:
    directory = tempfile.mkdtemp(prefix="archetype-doc-")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [directory, str(ROOT), os.environ.get("PYTHONPATH")]))
    namespace.update(__dir__=directory, __cwd__=os.getcwd(), __loop__=asyncio.new_event_loop(), __groups__=[],
                     __env__=env, __name__="__doc__",
                     __components__={key: list(classes) for key, classes in _components._LOADED.items()})  # fmt: skip
    # A document sees only the component classes it defines, as in a fresh process: not those
    # of the tests or pages that ran before it in this one, nor those of archetype's own modules a
    # test imported (`archetype.bench` and `archetype.demo` define a Position of x and y, the very
    # schema schema-evolution.md saves and then expects no loaded class to decode).
    _components._LOADED.clear()
    os.chdir(directory)
    sys.path.insert(0, directory)


def teardown(namespace: dict[str, Any]) -> None:
    directory = namespace["__dir__"]
    for group in namespace["__groups__"]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    loop = namespace["__loop__"]
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
    os.chdir(namespace["__cwd__"])
    sys.path.remove(directory)
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(directory):
            del sys.modules[name]
    shutil.rmtree(directory, ignore_errors=True)
    # The component classes a document defined go with it, and the others come back: a class of
    # the same name and fields elsewhere would otherwise decode what a page saved
    # (schema-evolution.md relies on an old fingerprint having no loaded class).
    _components._LOADED.clear()
    _components._LOADED.update(namespace["__components__"])


_collect = Sybil(parsers=[fences], patterns=["*.md"], path=str(ROOT), setup=setup, teardown=teardown).pytest()
DOC_FOLDERS = {Path("docs"), Path("docs/guide")}


def pytest_collect_file(file_path: Path, parent: Any) -> Any:
    """Only the project's own docs, not a README under tests/ or node_modules/."""
    if file_path.suffix == ".md" and file_path.is_relative_to(ROOT):
        relative = file_path.relative_to(ROOT)
        if relative == Path("README.md") or relative.parent in DOC_FOLDERS:
            return _collect(file_path, parent)
    return None
