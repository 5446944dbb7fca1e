"""Benchmark: start-up of ``import det_sdk`` and ``det --help`` as ratios to ``python -c pass``.

Goals (issue 26): ``import det_sdk`` <= 1.05x and ``det --help`` <= 2x the bare
interpreter's start-up, on this machine, measured side by side.

Each claim is measured in pairs: a fresh ``python -c pass`` (A) and a fresh process of
the command (B), one right after the other, the order alternating from pair to pair
(AB, BA, ...) so that a slow moment of the machine falls on both. Each pair gives one
ratio B/A; the figure is the median ratio with a distribution-free 95% interval (order
statistics of the median). A pair is *clean* when its A is within 1.5x of the fastest
A seen (a pair taken while the machine was busy is dropped, not averaged in). Pairs are
taken in rounds until the interval lies wholly on one side of the goal:

* ``OK``       interval's upper end <= goal, with at least ``--min-pairs`` clean pairs;
* ``MISSED``   interval's lower end > goal;
* ``UNDECIDED`` ``--max-pairs`` taken and the interval still straddles the goal, or
  too few clean pairs: never reported as OK.

Processes start with ``os.posix_spawn`` (the harness's own cost is the same on both
sides and small) and bytecode writing allowed (PYTHONDONTWRITEBYTECODE removed, a
warm-up run first), as a user's installed package runs. ``det --help`` runs the console
script next to this Python (``python -m det_sdk.cli.main --help`` when there is none).

Before timing, two checks run in their own processes: after ``import det_sdk`` and after
the CLI's ``main(["--help"])`` none of TensorFlow, Keras, numpy, pydantic, httpx, yaml,
FastAPI, uvicorn or the crypto modules (secrets, hmac) is in ``sys.modules``.

Usage::

    .venv/bin/python scripts/bench/bench_import.py [--min-pairs 60] [--max-pairs 600]

Exit status 0 when every check passes and every goal is met (OK); 1 otherwise.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("tensorflow", "keras", "numpy", "pydantic", "httpx", "yaml", "fastapi", "uvicorn",
         "starlette", "secrets", "hmac", "sqlite3")

CHECK_IMPORT = f"""
import sys
import det_sdk
print(",".join(m for m in {HEAVY!r} if m in sys.modules))
"""

CHECK_CLI = f"""
import contextlib, io, sys
from det_sdk.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["--help"])
    except SystemExit as e:
        assert e.code in (0, None), f"det --help exited {{e.code}}"
assert "usage: det" in out.getvalue(), out.getvalue()
print(",".join(m for m in {HEAVY!r} if m in sys.modules))
"""

CLEAN_FACTOR = 1.5  # a pair whose reference took over 1.5x the fastest one is not clean


def det_command(python: str) -> list[str]:
    script = Path(python).parent / "det"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), "--help"]
    return [python, "-m", "det_sdk.cli.main", "--help"]


def bench_env() -> dict[str, str]:
    """The environment the processes run in: bytecode caches written and read, as usual."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def loaded_modules(python: str, code: str) -> list[str]:
    """Run ``code`` in a fresh ``python``; it prints the heavy modules it found loaded."""
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                         env=bench_env())
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    return [m for m in line.split(",") if m]


def run_once(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning ``cmd`` to its exit (output to /dev/null); fails if it fails."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
        t0 = time.perf_counter()
        pid = os.posix_spawn(cmd[0], cmd, env, file_actions=actions)
        _, status = os.waitpid(pid, 0)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {os.waitstatus_to_exitcode(status)})")
    return elapsed


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """The median and a distribution-free 95% interval for it (order statistics)."""
    xs = sorted(values)
    n = len(xs)
    k = max(0, math.floor(n / 2 - 1.96 * math.sqrt(n) / 2))
    return statistics.median(xs), xs[k], xs[min(n - 1, n - 1 - k)]


def measure_ratio(ref: list[str], cmd: list[str], goal: float, min_pairs: int,
                  max_pairs: int, batch: int = 20,
                  env: dict[str, str] | None = None) -> dict[str, float | int | str]:
    """Pairs of (ref, cmd) runs, alternating order, until the ratio's interval decides.

    Returns the median ratio (``ratio``) and its interval (``low``, ``high``), the
    ``verdict`` against ``goal``, the pairs taken and kept (``pairs``, ``clean``), and the
    clean pairs' median times with the command's interval (``ref_s``, ``cmd_s``,
    ``cmd_low_s``, ``cmd_high_s``).
    """
    env = env or bench_env()
    for c in (ref, cmd, ref, cmd):  # warm the file cache and write bytecode
        run_once(c, env)
    pairs: list[tuple[float, float]] = []
    verdict = "UNDECIDED"
    while len(pairs) < max_pairs:
        for _ in range(batch):
            if len(pairs) % 2 == 0:
                a = run_once(ref, env)
                b = run_once(cmd, env)
            else:
                b = run_once(cmd, env)
                a = run_once(ref, env)
            pairs.append((a, b))
        fastest = min(a for a, _ in pairs)
        clean = [b / a for a, b in pairs if a <= CLEAN_FACTOR * fastest]
        if len(clean) < min_pairs:
            continue
        med, lo, hi = median_interval(clean)
        if hi <= goal:
            verdict = "OK"
            break
        if lo > goal:
            verdict = "MISSED"
            break
    fastest = min(a for a, _ in pairs)
    kept = [(a, b) for a, b in pairs if a <= CLEAN_FACTOR * fastest]
    ratios = [b / a for a, b in kept]
    med, lo, hi = median_interval(ratios) if ratios else (math.nan, math.nan, math.nan)
    if len(ratios) < min_pairs:
        verdict = "UNDECIDED"
    _, cmd_lo, cmd_hi = median_interval([b for _, b in kept]) if kept else (0, math.nan,
                                                                              math.nan)
    return {"ratio": med, "low": lo, "high": hi, "goal": goal, "verdict": verdict,
            "pairs": len(pairs), "clean": len(ratios),
            "ref_s": statistics.median(a for a, _ in kept) if kept else math.nan,
            "cmd_s": statistics.median(b for _, b in kept) if kept else math.nan,
            "cmd_low_s": cmd_lo, "cmd_high_s": cmd_hi}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-pairs", type=int, default=60,
                        help="clean pairs needed before a verdict (default 60)")
    parser.add_argument("--max-pairs", type=int, default=600,
                        help="pairs at most per claim (default 600)")
    parser.add_argument("--import-goal", type=float, default=1.05)
    parser.add_argument("--help-goal", type=float, default=2.0)
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter with det_sdk installed (default: this one)")
    args = parser.parse_args(argv)
    py = args.python

    failed = False
    for what, code in (("import det_sdk", CHECK_IMPORT), ("det --help", CHECK_CLI)):
        mods = loaded_modules(py, code)
        failed |= bool(mods)
        print(f"{what}: {'LOADS ' + ', '.join(mods) if mods else 'loads none of'} "
              f"({', '.join(HEAVY)})")

    ref = [py, "-c", "pass"]
    claims = [("import det_sdk", [py, "-c", "import det_sdk"], args.import_goal),
              ("det --help", det_command(py), args.help_goal)]
    print(f"{os.cpu_count()} cpus; {' '.join(det_command(py))}; reference: python -c pass")
    for name, cmd, goal in claims:
        r = measure_ratio(ref, cmd, goal, args.min_pairs, args.max_pairs)
        failed |= r["verdict"] != "OK"
        print(f"  {name:<15} {r['ratio']:.3f}x python -c pass (95% interval "
              f"{r['low']:.3f}-{r['high']:.3f}; {r['cmd_s'] * 1e3:.1f} ms vs "
              f"{r['ref_s'] * 1e3:.1f} ms; {r['clean']} clean pairs of {r['pairs']}) "
              f"goal <= {goal} {r['verdict']}")
    print("all goals met" if not failed else "GOAL MISSED OR UNDECIDED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
