"""``det``: the command line of det_sdk.

Kept light: argparse only, and each command imports what it needs when it runs,
so that ``det --help`` answers at once and never loads TensorFlow.

>>> main(["--version"])  # doctest: +SKIP
det_sdk 0.1.0
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import det_sdk


def _runs_list(args: argparse.Namespace) -> int:
    from det_sdk.session import list_runs

    rows = list_runs(args.runs_dir)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no runs in {args.runs_dir}")
        return 0
    print(f"{'RUN':>4}  {'EPOCH':>5}  {'STEPS':>7}  {'CHECKPOINTS':>11}  LAST VALIDATION")
    for r in rows:
        val = ", ".join(f"{k}={v:.4g}" for k, v in (r["last_validation"] or {}).items())
        print(f"{r['run_id']:>4}  {r['epoch']:>5}  {r['steps_completed']:>7}  "
              f"{r['checkpoints']:>11}  {val}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det",
        description="det_sdk: train Keras models locally, under Horovod, or on a cluster.",
    )
    parser.add_argument("--version", action="version", version=f"det_sdk {det_sdk.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    runs = sub.add_parser("runs", help="local runs (python train.py on this machine)")
    runs_sub = runs.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = runs_sub.add_parser("list", help="list local runs with their progress")
    ls.add_argument("--runs-dir", default="det-runs", help="default: ./det-runs")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=_runs_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, LookupError, OSError) as err:
        print(f"det: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
