"""Benchmark: start-up time of ``import det_sdk`` and of ``det --help``, in fresh processes.

Each repetition starts, in turn (the order rotated every repetition):

* ``python -c pass``                 the interpreter alone, for reference;
* ``python -c "import det_sdk"``     the package import;
* ``det --help``                     the console script next to this Python
  (``python -m det_sdk.cli.main --help`` when there is none).

and times each process from start to exit; medians are reported. These are absolute
times (the target is absolute: each under ``--max-seconds``, 0.3 s by default), with the
bare interpreter's for comparison.

Before timing, two checks run in their own processes: after ``import det_sdk``
TensorFlow is not in ``sys.modules``, and neither is it after the CLI's
``main(["--help"])`` ran (``SystemExit`` caught).

Usage::

    .venv/bin/python scripts/bench_import.py [--reps 9] [--max-seconds 0.3]

Exit status 1 when a check fails or a median is over the target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHECK_IMPORT = """
import sys
import det_sdk
heavy = sorted(m for m in ("tensorflow", "keras", "numpy", "pydantic", "httpx", "yaml")
               if m in sys.modules)
print(",".join(heavy))
"""

CHECK_CLI = """
import contextlib, io, sys
from det_sdk.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["--help"])
    except SystemExit as e:
        assert e.code in (0, None), f"det --help exited {e.code}"
assert "usage: det" in out.getvalue(), out.getvalue()
heavy = sorted(m for m in ("tensorflow", "keras", "numpy", "pydantic", "httpx", "yaml")
               if m in sys.modules)
print(",".join(heavy))
"""


def det_command(python: str) -> list[str]:
    script = Path(python).parent / "det"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), "--help"]
    return [python, "-m", "det_sdk.cli.main", "--help"]


def loaded_modules(python: str, code: str) -> list[str]:
    """Run ``code`` in a fresh ``python``; it prints the heavy modules it found loaded."""
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    return [m for m in line.split(",") if m]


def time_process(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9, help="repetitions (default 9)")
    parser.add_argument("--max-seconds", type=float, default=0.3,
                        help="target for each median, seconds (default 0.3)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter with det_sdk installed (default: this one)")
    args = parser.parse_args(argv)
    py = args.python

    failed = False
    after_import = loaded_modules(py, CHECK_IMPORT)
    after_cli = loaded_modules(py, CHECK_CLI)
    for what, mods in (("import det_sdk", after_import), ("det --help", after_cli)):
        tf_loaded = "tensorflow" in mods
        failed |= tf_loaded
        print(f"{what}: tensorflow {'LOADED' if tf_loaded else 'not loaded'} "
              f"(heavy modules loaded: {', '.join(mods) or 'none'})")

    commands = {
        "python -c pass": [py, "-c", "pass"],
        "import det_sdk": [py, "-c", "import det_sdk"],
        "det --help": det_command(py),
    }
    print(f"det --help runs: {' '.join(commands['det --help'])}")
    names = list(commands)
    for name in names:  # warm the file cache
        time_process(commands[name])
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.reps):
        for name in names[i % 3:] + names[: i % 3]:
            times[name].append(time_process(commands[name]))

    base = statistics.median(times["python -c pass"])
    print(f"\nmedian of {args.reps} fresh processes ({os.cpu_count()} cpus):")
    for name in names:
        med = statistics.median(times[name])
        spread = f"min {min(times[name]):.3f}s max {max(times[name]):.3f}s"
        if name == "python -c pass":
            print(f"  {name:<16} {med:.3f}s ({spread}) reference")
            continue
        ok = med <= args.max_seconds
        failed |= not ok
        print(f"  {name:<16} {med:.3f}s ({spread}) +{med - base:.3f}s over bare python; "
              f"target <= {args.max_seconds}s {'OK' if ok else 'MISSED'}")
    print("all targets met" if not failed else "TARGET MISSED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
