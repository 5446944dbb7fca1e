"""Benchmark: the CPU and the wall time of starting ranks under ``horovodrun --gloo``
against det_sdk's launcher (``python -m det_sdk.launch.horovodrun``, how the master
starts a multi-slot trial), side by side, rounds alternating.

Each launch runs ``-np N --gloo python -c pass``: what is measured is the launcher's
own start-up (``horovodrun`` forks a process that imports TensorFlow to ask whether
Horovod has Gloo; det_sdk's reads the extension's file). CPU is the launcher's and its
children's (user + system, from ``os.wait4``).

    .venv/bin/python scripts/bench/bench_launch.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def launch(command: list[str]) -> tuple[float, float]:
    """(CPU s, wall s) of one run of ``command`` and every process it waited for."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{command[:3]} failed: exit {os.waitstatus_to_exitcode(status)}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-np", type=int, default=2, dest="np")
    ap.add_argument("--goal", type=float, default=0.5,
                    help="most CPU of det_sdk's launch over horovodrun's")
    args = ap.parse_args()
    ranks = ["-np", str(args.np), "--gloo", sys.executable, "-c", "pass"]
    runs = {"horovodrun": [str(Path(sys.executable).with_name("horovodrun")), *ranks],
            "det_sdk": [sys.executable, "-m", "det_sdk.launch.horovodrun", *ranks]}
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for r in range(args.rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            got[name].append(launch(runs[name]))
    for name, rows in got.items():
        cpu = statistics.median(c for c, _ in rows)
        wall = statistics.median(w for _, w in rows)
        print(f"{name:>10}: CPU {cpu:.2f} s, wall {wall:.2f} s (median of {args.rounds})")
    cpu_ratio = (statistics.median(c for c, _ in got["det_sdk"])
                 / statistics.median(c for c, _ in got["horovodrun"]))
    wall_ratio = (statistics.median(w for _, w in got["det_sdk"])
                  / statistics.median(w for _, w in got["horovodrun"]))
    print(f"det_sdk / horovodrun: CPU {cpu_ratio:.2f}x, wall {wall_ratio:.2f}x")
    if cpu_ratio > args.goal:
        print(f"MISSED (goal <= {args.goal}): CPU {cpu_ratio:.2f}x")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
