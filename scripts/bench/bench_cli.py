"""Start-up of `det --help` and wall time of `det experiment list` (a real master), no TensorFlow.

The master holds a history (``--experiments``, default 1,000 finished experiments of 3
trials, put into its database in bulk through SQLite before it starts:
``harness/history.py``), so that `det experiment list` has something to
list; an empty master would time only the CLI's start-up (issue 15). Each command is
measured against a fresh ``python -c pass`` side by side, alternating which runs first,
until the interval decides (``bench_import.measure_ratio``: median ratio, distribution-free
95% interval, pairs taken while the machine was busy dropped, never OK without
``--min-pairs`` clean pairs). Also asserts that neither command imports TensorFlow
(python -X importtime lists every import), and that the list shows rows.

    .venv/bin/python scripts/bench/bench_cli.py [--min-pairs 30] [--experiments 1000]

Goals: `det --help` <= 2x `python -c pass` (issue 26; scripts/bench/bench_import.py gates it
too), `det experiment list` < 0.5 s with its interval's upper end (issue 15). Exit 1 if
missed or undecided.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/
from bench_import import measure_ratio

from harness.history import fill_history
from harness.master import DET, Cluster


def _imports_tensorflow(args: list[str], env: dict[str, str]) -> bool:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "det_sdk.cli.main", *args],
                         env=env, capture_output=True, text=True)
    return any(line.split("|")[-1].strip() == "tensorflow" for line in out.stderr.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-pairs", type=int, default=30,
                        help="clean pairs needed before a verdict (default 30)")
    parser.add_argument("--max-pairs", type=int, default=200)
    parser.add_argument("--experiments", type=int, default=1000,
                        help="finished experiments in the master's history")
    args = parser.parse_args()
    master = Cluster(Path(tempfile.mkdtemp(prefix="bench-cli-")), slots=1)
    env = master.env
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's install runs: bytecode cached
    fill_history(master.data_dir / "master.db", args.experiments, trials_per_experiment=3)
    master.up()
    try:
        ref = [sys.executable, "-c", "pass"]
        help_r = measure_ratio(ref, [str(DET), "--help"], 2.0, args.min_pairs,
                               args.max_pairs, env=env)
        list_r = measure_ratio(ref, [str(DET), "experiment", "list"], math.inf,
                               args.min_pairs, args.max_pairs, batch=10, env=env)
        base, help_t, list_t = help_r["ref_s"], help_r["cmd_s"], list_r["cmd_s"]
        shown = subprocess.run([str(DET), "experiment", "list"], env=env, check=True,
                               capture_output=True, text=True).stdout.splitlines()
        rows = len(shown) - 1 - (shown[-1].startswith("showing") if shown else 0)
        tf_help = _imports_tensorflow(["--help"], env)
        tf_list = _imports_tensorflow(["experiment", "list"], env)
    finally:
        master.stop()
    list_ok = list_r["clean"] >= args.min_pairs and list_r["cmd_high_s"] < 0.5
    print(json.dumps({"python_startup_s": round(base, 4), "det_help_s": round(help_t, 4),
                      "det_help_ratio": [round(help_r[k], 3) for k in ("ratio", "low", "high")],
                      "det_experiment_list_s": [round(list_r[k], 4)
                                                for k in ("cmd_s", "cmd_low_s", "cmd_high_s")],
                      "det_experiment_list_ratio": round(list_r["ratio"], 2),
                      "clean_pairs": [help_r["clean"], list_r["clean"]],
                      "experiments": args.experiments, "rows_shown": rows,
                      "tensorflow_imported": {"help": tf_help, "experiment_list": tf_list}}))
    print(f"det --help: {help_r['ratio']:.3f}x python -c pass (95% interval "
          f"{help_r['low']:.3f}-{help_r['high']:.3f}; {help_t * 1e3:.1f} ms; goal <= 2.0) "
          f"{help_r['verdict']}")
    print(f"det experiment list over {args.experiments} experiments ({rows} rows shown): "
          f"{list_t:.3f} s (95% interval {list_r['cmd_low_s']:.3f}-"
          f"{list_r['cmd_high_s']:.3f}; {list_r['ratio']:.1f}x python -c pass; goal < 0.5 s) "
          f"{'OK' if list_ok else 'MISSED'}; python start-up alone: {base * 1e3:.1f} ms")
    # an empty list would time nothing but start-up: not a pass
    ok = (help_r["verdict"] == "OK" and list_ok and not tf_help and not tf_list
          and rows == min(20, args.experiments) > 0)
    print("OK" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
