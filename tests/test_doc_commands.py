"""The `archetype` command lines the docs show but do not run (`console` and `text` blocks, which
Sybil leaves alone: docs/testing.md, "Docs") name commands and options the CLI has, so a renamed
flag fails here rather than in a reader's terminal; and the deploy guide runs `archetype runner`,
never a stepping loop of its own (issue 22)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from archetype.cli import ListByDefault, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs/guide").glob("*.md"))]
SHOWN = re.compile(r"^```(?:console|text)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMAND = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?archetype (.*)$")


def shown_commands() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        for block in SHOWN.finditer(path.read_text()):
            for line in block.group(1).splitlines():
                if match := COMMAND.match(line.strip()):
                    found.append((f"{path.relative_to(ROOT)}: archetype {match.group(1)}", match.group(1)))
    return found


def resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The (sub)command the words name, and the words after its name."""
    command: click.Command = main
    while isinstance(command, click.Group):
        name = next((w for w in words if not w.startswith("-")), None)
        if name in command.commands:
            words = words[words.index(name) + 1 :]
            command = command.commands[name]
        elif isinstance(command, ListByDefault):
            command = command.commands["list"]
        else:
            raise AssertionError(f"no command {name!r} in {command.name}: {', '.join(command.commands)}")
    return command, words


@pytest.mark.parametrize(("where", "line"), shown_commands(), ids=[where for where, _ in shown_commands()])
def test_a_shown_command_line_names_options_the_cli_has(where, line):
    words = [w for w in shlex.split(line.split(" #", 1)[0].replace("[", " ").replace("]", " ")) if w not in "|&;"]
    command, rest = resolve(words)
    options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    unknown = [w.split("=", 1)[0] for w in rest if w.startswith("-") and w.split("=", 1)[0] not in options]
    assert not unknown, f"{where}: {command.name} has no option {', '.join(unknown)}"


def test_the_deploy_guide_steps_worlds_with_archetype_runner():
    for page in ("docs/guide/deploy-cloudflare.md", "docs/deployment.md"):
        text = (ROOT / page).read_text()
        assert "archetype runner --url" in text, page
        assert not re.search(r"while True:\s*\n\s*await \w+\.dispatcher\.apply\(Step", text), f"{page} hand-writes a runner loop"
