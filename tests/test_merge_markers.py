"""No tracked file carries a merge's conflict markers. Python files would fail to import, but a page
of docs/ or a SQL string in a test table is read by nothing that chokes on them (docs/http.md kept
a conflict for a merge, unseen by every suite)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^(<{7}|>{7})( |$)", re.MULTILINE)


def test_no_tracked_file_holds_conflict_markers():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    found = []
    for name in tracked.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # a binary file
            continue
        found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}" for m in MARKER.finditer(text)]
    assert not found, f"conflict markers left by a merge: {found}"
