"""Ledger throughput against raw sqlite3: single and batched admission, and admit -> lease ->
materialize -> publish of 10,000 commands due in one tick, on a 10,000- and a 1,000,000-row ledger.

    .venv/bin/python bench/ledger_bench.py [--large 1000000] [--repeat 3] [--help]

The same as `archetype bench`; the workloads, baselines and targets are described in
src/archetype/bench.py and the latest figures are in docs/performance.md.
"""

from archetype.cli import main

if __name__ == "__main__":
    main(["bench", *__import__("sys").argv[1:]])
