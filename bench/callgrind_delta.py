"""Per-function instructions per admission from a pair of callgrind files of one piece (runs of
two counts, `bench/admission_instructions.py --keep DIR`): callgrind_annotate of each, the larger
run's count less the smaller's, over the difference of their counts.

    python bench/callgrind_delta.py SMALL LARGE SPAN [--self] [--top 40]

Inclusive counts by default (a function with what it calls); `--self` the function's own. On
CPython 3.11 the Python functions are not among them (the interpreter's eval loop is): what shows
is the C the admission calls into (pydantic-core, the JSON encoder, dict and attribute look-ups,
allocation, frames).
"""

from __future__ import annotations

import argparse
import re
import subprocess

_ROW = re.compile(r"\s*([\d,]+)\s+(?:\([\s\d.%]+\)\s+)?(\S.*)$")


def table(path: str, inclusive: bool) -> dict[str, int]:
    out = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    rows: dict[str, int] = {}
    for line in out.splitlines():
        match = _ROW.match(line)
        if match and ":" in match.group(2):
            name = match.group(2).strip()
            rows[name] = rows.get(name, 0) + int(match.group(1).replace(",", ""))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("small")
    parser.add_argument("large")
    parser.add_argument("span", type=int, help="the larger run's count less the smaller's")
    parser.add_argument("--self", action="store_true", dest="own", help="each function's own instructions")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    small, large = table(args.small, not args.own), table(args.large, not args.own)
    delta = {name: (large.get(name, 0) - small.get(name, 0)) / args.span for name in small.keys() | large.keys()}
    for name, count in sorted(delta.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{count:12,.0f}  {name[:160]}")


if __name__ == "__main__":
    main()
