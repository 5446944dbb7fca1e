"""Sum the CPU the tests spent, by file (or by test), from a DET_TEST_CPU record.

On 2 cores the suite is bound by CPU: a file's cost to CI is its CPU, not its wall time
under load. Record a run, then read it:

    DET_TEST_CPU=/tmp/cpu.jsonl bash scripts/test.sh tests/e2e/test_horovod.py
    python scripts/test_cpu_report.py /tmp/cpu.jsonl            # by file, costliest first
    python scripts/test_cpu_report.py /tmp/cpu.jsonl --tests    # by test

>>> rows = [{"test": "a.py::x", "wall": 2, "cpu_self": 1, "cpu_children": 4},
...         {"test": "a.py::y", "wall": 1, "cpu_self": 1, "cpu_children": 0}]
>>> summed(rows, by_test=False)
[('a.py', 2, 3.0, 6.0)]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def summed(rows: list[dict], by_test: bool) -> list[tuple[str, int, float, float]]:
    """(name, tests, wall s, CPU s) per file or test, the most CPU first."""
    acc: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        name = r["test"] if by_test else r["test"].split("::")[0]
        a = acc[name]
        a[0] += 1
        a[1] += r["wall"]
        a[2] += r["cpu_self"] + r["cpu_children"]
    return sorted(((k, int(v[0]), round(v[1], 1), round(v[2], 1)) for k, v in acc.items()),
                  key=lambda row: -row[3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("--tests", action="store_true", help="by test instead of by file")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.record.read_text().splitlines() if line]
    table = summed(rows, args.tests)
    print(f"{'CPU s':>8} {'wall s':>8} {'tests':>5}  (total CPU {sum(r[3] for r in table):.0f} s)")
    for name, n, wall, cpu in table[:args.top]:
        print(f"{cpu:8.1f} {wall:8.1f} {n:5d}  {name}")


if __name__ == "__main__":
    main()
