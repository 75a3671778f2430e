"""docs/performance.md as the benches write it: each bench owns one `## ` section, which a run
replaces with its new figures while keeping the section's hand-written `### Reading it`."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

PERFORMANCE_DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
READING = "\n### Reading it"


def replace_section(heading: str, lines: list[str]) -> None:
    """Put `lines` (starting with `heading`) in place of the section under `heading`, or at the end."""
    text = PERFORMANCE_DOC.read_text() if PERFORMANCE_DOC.exists() else "# Performance\n\n"
    new = "\n".join(lines).rstrip("\n") + "\n"
    if heading not in text:
        PERFORMANCE_DOC.write_text(text.rstrip("\n") + "\n\n" + new)
        return
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    section = text[start:end] if end != -1 else text[start:]
    kept = section[section.index(READING) :].rstrip("\n") + "\n" if READING in section else ""
    after = "\n" + text[end + 1 :] if end != -1 else ""
    PERFORMANCE_DOC.write_text(text[:start] + new + kept + after)


def run_line(started: float, options: str) -> str:
    """The line that opens a bench's section: when, on what, under what load, with which options."""
    load = os.getloadavg()
    return (f"Run {time.strftime('%Y-%m-%d', time.gmtime(started))}, {platform.machine()} with {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end; "
            f"{options}.")  # fmt: skip


def publish(heading: str, lines: list[str], *, record: bool) -> None:
    """Print a bench's section and, when `record`, put it in docs/performance.md."""
    print("\n".join(lines))
    if record:
        replace_section(heading, lines)
        print(f"\nrecorded in {PERFORMANCE_DOC.relative_to(PERFORMANCE_DOC.parents[1])}")
