"""``det``: the command line of det_sdk.

Kept light: argparse only, and each command imports what it needs when it runs,
so that ``det --help`` answers at once and never loads TensorFlow.

>>> main(["--version"])  # doctest: +SKIP
det_sdk 0.1.0
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

import det_sdk
from det_sdk.errors import DetSdkError

DEFAULT_MASTER = "http://127.0.0.1:8080"


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


_ARG_HELP = {
    "config": "the YAML config file",
    "model_dir": "the directory to upload (the entrypoint runs in a copy of it)",
    "id": "the id",
    "uuid": "the checkpoint's UUID",
    "dir": "where to put the checkpoint's files",
}
_ARG_TYPES = {"id": int, "--trial": int}

# Determined's CLI aliases (its `e|xperiment`, `t|rial`, `c|heckpoint`, `j|ob` nouns and
# `list ls`, `activate unpause` verbs), for the commands det_sdk has
NOUN_ALIASES = {"experiment": ["e"], "trial": ["t"], "checkpoint": ["c"], "job": ["j"]}
VERB_ALIASES = {"list": ["ls"], "activate": ["unpause"]}


def _add_task_commands(sub: argparse._SubParsersAction) -> None:
    from det_sdk.cli.tasks import COMMANDS

    for noun, verbs in COMMANDS.items():
        p = sub.add_parser(noun, help=f"{noun} commands (talk to a master)",
                           aliases=NOUN_ALIASES.get(noun, []))
        verbs_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
        for verb, (func, help_text, arguments) in verbs.items():
            v = verbs_sub.add_parser(verb, help=help_text, aliases=VERB_ALIASES.get(verb, []))
            for name, *options in arguments:
                if options:  # argparse options given with the command (--all, --limit)
                    v.add_argument(name, **options[0])
                elif name == "--follow":
                    v.add_argument("--follow", "-f", action="store_true",
                                   help="print logs until it ends; exit 0 only if it completed")
                elif name.startswith("--"):
                    v.add_argument(name, type=_ARG_TYPES.get(name), help="filter by trial id")
                else:
                    v.add_argument(name, type=_ARG_TYPES.get(name), help=_ARG_HELP[name])
            v.add_argument("--json", action="store_true", help="machine-readable output")
            v.set_defaults(func=func)


def _add_master_commands(sub: argparse._SubParsersAction) -> None:
    from det_sdk.cli import master_cmd

    p = sub.add_parser("master", help="run the embedded master on this machine")
    m = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = m.add_parser("up", help="start a master in the background")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8080)
    up.add_argument("--slots", type=int, default=os.cpu_count() or 1,
                    help="slots to schedule on (GPUs, or on a CPU machine as you choose)")
    master_cmd.add_up_options(up)  # where tasks run: --resource-manager local|slurm, ...
    up.set_defaults(func=master_cmd.master_up)
    down = m.add_parser("down", help="stop the master")
    down.set_defaults(func=master_cmd.master_down)
    status = m.add_parser("status", help="is the master up? (exit 3 if not)")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=master_cmd.master_status)
    for q in (up, down, status):
        q.add_argument("--data-dir", help="state, logs, checkpoints (default ~/.det/master, "
                                           "or DET_MASTER_DIR)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det",
        description="det_sdk: train Keras models locally, under Horovod, or on a cluster.",
    )
    parser.add_argument("--version", action="version", version=f"det_sdk {det_sdk.__version__}")
    parser.add_argument("-m", "--master", default=os.environ.get("DET_MASTER", DEFAULT_MASTER),
                        help=f"the master's URL, or host:port for http://host:port "
                             f"(DET_MASTER; default {DEFAULT_MASTER})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_master_commands(sub)
    _add_task_commands(sub)
    from det_sdk.cli import ui_cmd  # det ui, det tensorboard (issue 12)

    ui_cmd.add_commands(sub)

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
        from det_sdk._master_url import master_url

        if args.command != "runs":  # local runs never talk to a master
            args.master = master_url(args.master)  # Determined's host:port: http://host:port
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (DetSdkError, OSError) as err:
        # what det_sdk refuses (ConfigError, UsageError, MasterError, MasterUnreachable...)
        # or a file it cannot read or write: the message says it all. Anything else (a
        # KeyError, a TypeError) is a bug and shows as one, with its traceback.
        print(f"det: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
