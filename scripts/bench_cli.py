"""Wall time of `det --help` and `det experiment list` (a real master), with no TensorFlow.

The master holds a history (``--experiments``, default 1,000 finished experiments of 3
trials, put into its database in bulk through SQLite before it starts:
``scripts/_bench_master.fill_history``), so that `det experiment list` has something to
list; an empty master would time only the CLI's start-up (issue 15). Each command runs
several times in a fresh process; the median is reported beside the bare interpreter
start-up (`python -c pass`) for reference. Also asserts that neither command imports
TensorFlow (python -X importtime lists every import), and that the list shows rows.

    .venv/bin/python scripts/bench_cli.py [--reps 7] [--experiments 1000]

Targets (issue 4): `det --help` < 0.3 s, `det experiment list` < 0.5 s. Exit 1 if missed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DET = Path(sys.executable).with_name("det")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_master import fill_history  # noqa: E402


def _time(cmd: list[str], env: dict[str, str], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _imports_tensorflow(args: list[str], env: dict[str, str]) -> bool:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "det_sdk.cli.main", *args],
                         env=env, capture_output=True, text=True)
    return any(line.split("|")[-1].strip() == "tensorflow" for line in out.stderr.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--experiments", type=int, default=1000,
                        help="finished experiments in the master's history")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HOME": str(root), "DET_MASTER": url}
    env.pop("DET_USER_TOKEN", None)
    fill_history(root / "m" / "master.db", args.experiments, trials_per_experiment=3)
    subprocess.run([str(DET), "master", "up", "--data-dir", str(root / "m"), "--port", str(port),
                    "--slots", "1"], env=env, check=True, capture_output=True)
    try:
        base = _time([sys.executable, "-c", "pass"], env, args.reps)
        help_t = _time([str(DET), "--help"], env, args.reps)
        list_t = _time([str(DET), "experiment", "list"], env, args.reps)
        shown = subprocess.run([str(DET), "experiment", "list"], env=env, check=True,
                               capture_output=True, text=True).stdout.splitlines()
        rows = len(shown) - 1 - (shown[-1].startswith("showing") if shown else 0)
        tf_help = _imports_tensorflow(["--help"], env)
        tf_list = _imports_tensorflow(["experiment", "list"], env)
    finally:
        subprocess.run([str(DET), "master", "down", "--data-dir", str(root / "m")], env=env,
                       capture_output=True)
    print(json.dumps({"python_startup_s": round(base, 3), "det_help_s": round(help_t, 3),
                      "det_experiment_list_s": round(list_t, 3),
                      "experiments": args.experiments, "rows_shown": rows,
                      "tensorflow_imported": {"help": tf_help, "experiment_list": tf_list}}))
    print(f"det --help: {help_t:.3f} s (target < 0.3); det experiment list over "
          f"{args.experiments} experiments ({rows} rows shown): {list_t:.3f} s "
          f"(target < 0.5); python start-up alone: {base:.3f} s")
    # an empty list would time nothing but start-up: not a pass
    ok = (help_t < 0.3 and list_t < 0.5 and not tf_help and not tf_list
          and rows == min(20, args.experiments) > 0)
    print("OK" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
