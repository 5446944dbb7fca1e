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

Where ``<record>.d`` holds what each Python process wrote at exit (scripts/cpu_probe,
installed by setup.sh), a test's children count as the larger of what it reaped and what
its processes wrote, so a daemon master's trials are counted:

>>> with_tree([{"test": "a.py::x", "wall": 1, "cpu_self": 1, "cpu_children": 2}],
...           {("keras3", "a.py::x"): 5.0})
[{'test': 'a.py::x', 'wall': 1, 'cpu_self': 1, 'cpu_children': 5.0}]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
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


def probe_line(text: str) -> tuple[float, str]:
    """A probe file's CPU seconds and the frameworks its process had loaded (``-``: none;
    files of before the frameworks were written have none).

    >>> probe_line("1.5 0.25 tensorflow,jax")
    (1.75, 'tensorflow,jax')
    >>> probe_line("1.0 0.5")
    (1.5, '-')
    """
    fields = text.split()
    return float(fields[0]) + float(fields[1]), (fields[2] if len(fields) > 2 else "-")


def probes(directory: Path) -> Iterator[tuple[str, str, float, str]]:
    """(stack, test, CPU s, frameworks) of each process that wrote under ``directory``."""
    if not directory.is_dir():
        return
    for test in directory.glob("*/*"):
        for f in test.glob("*.cpu"):
            try:
                cpu, frameworks = probe_line(f.read_text())
            except (ValueError, IndexError):  # a process that died mid-write
                continue
            yield test.parent.name, test.name.replace("~", "/"), cpu, frameworks


def tree_cpu(directory: Path) -> dict[tuple[str, str], float]:
    """CPU seconds the processes of each (stack, test) wrote under ``directory`` at exit."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for stack, test, cpu, _ in probes(directory):
        out[(stack, test)] += cpu
    return dict(out)


def framework_processes(directory: Path, stack: str | None) -> dict[str, Counter[str]]:
    """Per test file, how many of its processes loaded each framework (TensorFlow's import
    alone is 3-5 s of CPU): where fewer processes would save most.

    >>> framework_processes(Path("/nonexistent"), None)
    {}
    """
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for st, test, _, frameworks in probes(directory):
        if stack is None or st == stack:
            out[test.split("::")[0]].update(frameworks.split(","))
    return dict(out)


def with_tree(rows: list[dict], tree: dict[tuple[str, str], float]) -> list[dict]:
    """Rows whose children's CPU is at least what their processes reported."""
    return [{**r, "cpu_children": max(r["cpu_children"],
                                      tree.get((r.get("stack", "keras3"), r["test"]), 0.0))}
            for r in rows]


def spans(rows: list[dict]) -> list[tuple[str, str, float, float]]:
    """(stack, file, start, end) of each file, in seconds from its stack's first test, by end.

    >>> spans([{"test": "a.py::x", "start": 10.0, "wall": 2, "stack": "keras3"},
    ...        {"test": "b.py::y", "start": 11.0, "wall": 5, "stack": "keras3"}])
    [('keras3', 'a.py', 0.0, 2.0), ('keras3', 'b.py', 1.0, 6.0)]
    """
    first: dict[str, float] = {}
    acc: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if "start" not in r:
            continue
        stack = r.get("stack", "keras3")
        first[stack] = min(first.get(stack, r["start"]), r["start"])
        span = acc.setdefault((stack, r["test"].split("::")[0]), [r["start"], r["start"]])
        span[0] = min(span[0], r["start"])
        span[1] = max(span[1], r["start"] + r["wall"])
    return sorted(((st, f, round(a - first[st], 1), round(b - first[st], 1))
                   for (st, f), (a, b) in acc.items()), key=lambda x: (x[0], x[3]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("--tests", action="store_true", help="by test instead of by file")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--stack", help="only this stack's tests (keras3, keras2)")
    parser.add_argument("--frameworks", action="store_true",
                        help="also count each file's processes by the framework they loaded")
    parser.add_argument("--last", type=int, default=0,
                        help="also list the N files each stack ended with (its tail)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.record.read_text().splitlines() if line]
    if args.stack:
        rows = [r for r in rows if r.get("stack", "keras3") == args.stack]
    tree = Path(str(args.record) + ".d")
    rows = with_tree(rows, tree_cpu(tree))
    table = summed(rows, args.tests)
    counts = framework_processes(tree, args.stack) if args.frameworks else {}
    extra = "  tf jax torch" if args.frameworks else ""
    print(f"{'CPU s':>8} {'wall s':>8} {'tests':>5}{extra}  (total CPU "
          f"{sum(r[3] for r in table):.0f} s)")
    for name, n, wall, cpu in table[:args.top]:
        c = counts.get(name.split("::")[0], Counter())
        cols = f"  {c['tensorflow']:2d} {c['jax']:3d} {c['torch']:5d}" if args.frameworks else ""
        print(f"{cpu:8.1f} {wall:8.1f} {n:5d}{cols}  {name}")
    if args.last:
        by_stack: dict[str, list[tuple[str, str, float, float]]] = defaultdict(list)
        for span in spans(rows):
            by_stack[span[0]].append(span)
        for stack, files in by_stack.items():
            print(f"\n{stack}: the last {args.last} files to end (start, end s)")
            for _, name, a, b in files[-args.last:]:
                print(f"{a:8.0f} {b:8.0f}  {name}")


if __name__ == "__main__":
    main()
