"""``det``: the command line of det_sdk.

Kept light: argparse only. The command table is assembled here (:data:`NOUNS`: each noun
of a master's, its module's verbs, over det_sdk.cli.common's helpers); every other
command's arguments are defined here too, and its module (``master_cmd``, ``ui_cmd``) is
imported when that command runs,
so that ``det --help`` answers at Python's speed (goal: <= 2x ``python -c pass``,
scripts/bench/bench_import.py) and never loads TensorFlow, FastAPI, httpx or pydantic.

>>> main(["--version"])  # doctest: +SKIP
det_sdk 0.1.0
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Collection, Sequence

import det_sdk
from det_sdk.cli.common import refusal, refused
from det_sdk.env import setting
from det_sdk.errors import DetSdkError

TYPE_CHECKING = False  # typing costs `det --help` 4 ms: for the type checker only
if TYPE_CHECKING:
    from typing import Any

DEFAULT_MASTER = "http://127.0.0.1:8080"
#: ``det master up --resource-manager``'s choices (det_sdk.master.resources.KINDS, which
#: the CLI does not import for its help; tests/unit/test_startup.py checks they agree)
RESOURCE_MANAGERS = ("local", "slurm")


class _Lazy:
    """A command's handler, ``module.name``, imported when the command runs."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.__name__ = module, name

    def __call__(self, args: argparse.Namespace) -> int | None:
        return getattr(importlib.import_module(self.module), self.__name__)(args)

    def __repr__(self) -> str:
        return f"<det command {self.module}.{self.__name__}>"


def _runs_list(args: argparse.Namespace) -> int:
    import json

    from det_sdk.session import list_runs

    rows = list_runs(args.runs_dir)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no runs in {args.runs_dir}")
        return 0
    print(f"{'RUN':>4}  {'EPOCH':>5}  {'STEPS':>7}  {'CHECKPOINTS':>11}  LAST VALIDATION")
    buckets = False
    for r in rows:
        val = ", ".join(f"{k}={v:.4g}" for k, v in (r["last_validation"] or {}).items())
        count = f"{r['checkpoints']}*" if r["checkpoints_in"] else str(r["checkpoints"])
        buckets = buckets or bool(r["checkpoints_in"])
        print(f"{r['run_id']:>4}  {r['epoch']:>5}  {r['steps_completed']:>7}  "
              f"{count:>11}  {val}")
    if buckets:
        print("* in a bucket (--json: checkpoints_in): the run's record, not a listing")
    return 0


_ARG_HELP = {
    "config": "the YAML config file",
    "model_dir": "the directory to upload (the entrypoint runs in a copy of it)",
    "id": "the id",
    "uuid": "the checkpoint's UUID",
    "dir": "where to put the checkpoint's files",
}
_ARG_TYPES = {"id": int, "--trial": int}

# Determined's CLI aliases (its `e|xperiment`, `t|rial`, `c|heckpoint`, `j|ob`, `m|odel`,
# `u|ser` nouns and `list ls`, `activate unpause`, `list-trials lt`... verbs)
NOUN_ALIASES = {"experiment": ["e"], "trial": ["t"], "checkpoint": ["c"], "job": ["j"],
                "model": ["m"], "user": ["u"]}
NOUN_ALIASES["command"] = ["cmd"]  # Determined's `command cmd` (issue 58)
VERB_ALIASES = {"list": ["ls"], "activate": ["unpause"], "list-trials": ["lt"],
                "list-checkpoints": ["lc"]}
#: the verb a bare noun runs, as in Determined (`det e` lists experiments)
DEFAULT_VERBS = {"experiment": "list", "model": "list", "task": "list", "job": "list",
                 "tensorboard": "list", "user": "whoami"}
DEFAULT_VERBS["command"] = "list"
DEFAULT_VERBS["shell"] = "list"  # det shell (issue 58)
NOUN_ALIASES["workspace"] = ["w"]  # Determined's `w|orkspace`, `p|roject` (issue 59)
NOUN_ALIASES["project"] = ["p"]
DEFAULT_VERBS["workspace"] = "list"
DEFAULT_VERBS["notebook"] = "list"  # det notebook (issue 58)


def _add_verbs(parent: argparse.ArgumentParser, verbs: dict[str, Any], dest: str) -> None:
    """A noun's (or a verb's: `e set name`) subcommands from a command table."""
    verbs_sub = parent.add_subparsers(dest=dest, metavar="ACTION")
    for verb, spec in verbs.items():
        aliases = VERB_ALIASES.get(verb, [])
        if isinstance(spec, dict):  # a group: `det e set name ID NAME`
            g = verbs_sub.add_parser(verb, help=f"{verb} ...", aliases=aliases)
            _add_verbs(g, spec, dest + "_" + verb.replace("-", "_"))
            continue
        func, help_text, arguments = spec
        v = verbs_sub.add_parser(verb, help=help_text, aliases=aliases)
        json_given = False
        for name, *options in arguments:
            names = name if isinstance(name, tuple) else (name,)
            json_given |= "--json" in names
            if options:  # argparse options given with the command (--all, --limit)
                v.add_argument(*names, **options[0])
            elif name == "--follow":
                v.add_argument("--follow", "-f", action="store_true",
                               help="print logs until it ends; exit 0 only if it completed")
            elif name.startswith("--"):
                v.add_argument(name, type=_ARG_TYPES.get(name, str), help="filter by trial id")
            else:
                v.add_argument(name, type=_ARG_TYPES.get(name, str), help=_ARG_HELP[name])
        if not json_given:
            v.add_argument("--json", action="store_true", help="machine-readable output")
        v.set_defaults(func=func)


_NOUN_OF = {alias: noun for noun, aliases in NOUN_ALIASES.items() for alias in aliases}


#: The nouns that talk to a master, in `det --help`'s order, each with the module of its
#: verbs (its ``COMMANDS``): the command table, assembled here. A noun's module is imported
#: only when its verbs' parsers are built (the command line names it, or no words given).
NOUNS = {
    "experiment": "det_sdk.cli.experiment_cmd",
    "trial": "det_sdk.cli.trial_cmd",
    "checkpoint": "det_sdk.cli.checkpoint_cmd",
    "job": "det_sdk.cli.job_cmd",
    "model": "det_sdk.cli.model_cmd",  # the master's model registry
    "user": "det_sdk.cli.user_cmd",
    "task": "det_sdk.cli.task_cmd",
    "webhook": "det_sdk.cli.webhook_cmd",  # the master's webhooks (issue 60)
    "command": "det_sdk.cli.command_cmd",  # det cmd run (issue 58)
    "slot": "det_sdk.cli.slot_cmd",  # the slots and who holds them (issue 60)
    "shell": "det_sdk.cli.shell_cmd",  # det shell start (issue 58)
    "workspace": "det_sdk.cli.workspace_cmd",  # workspaces (issue 59)
    "project": "det_sdk.cli.project_cmd",  # projects (issue 59)
    "notebook": "det_sdk.cli.notebook_cmd",  # det notebook start (issue 58)
    "rbac": "det_sdk.cli.rbac_cmd",  # roles (issue 59)
}


def _add_task_commands(sub: argparse._SubParsersAction,
                       words: set[str] | None) -> None:
    for noun, module in NOUNS.items():
        aliases = NOUN_ALIASES.get(noun, [])
        p = sub.add_parser(noun, help=f"{noun} commands (talk to a master)", aliases=aliases)
        if words is not None and noun not in words and not words.intersection(aliases):
            continue  # not this command: its actions' parsers are never looked at
        _add_verbs(p, importlib.import_module(module).COMMANDS, "action")


def _token_lifetime(text: str) -> str:
    """``--token-lifetime``, checked here (the master parses it again at start)."""
    from det_sdk.durations import parse_duration

    try:
        parse_duration(text, "--token-lifetime")
    except DetSdkError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _add_master_commands(sub: argparse._SubParsersAction) -> None:
    master_cmd = "det_sdk.cli.master_cmd"
    p = sub.add_parser("master", help="run the embedded master on this machine")
    m = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = m.add_parser("up", help="start a master in the background")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8080)
    up.add_argument("--slots", type=int, default=os.cpu_count() or 1,
                    help="slots to schedule on (GPUs, or on a CPU machine as you choose)")
    # where tasks run, chosen once for the master's life
    up.add_argument("--resource-manager", choices=RESOURCE_MANAGERS, default="local",
                    help="where trials and jobs run: local processes (default) or Slurm jobs")
    up.add_argument("--shared-dir",
                    help="where tasks' working directories, logs and checkpoints (unless a "
                         "config's checkpoint_storage.host_path says otherwise) go: a path "
                         "every node sees at the same place (default: the data directory)")
    # det_sdk.master.queue's POLICIES (not imported here: `det --help` stays light)
    up.add_argument("--scheduler", choices=("priority", "fair_share"), default="priority",
                    help="how queued work shares the slots: by resources.priority, with "
                         "preemption (default, as Determined's), or fair share between "
                         "users by resources.weight")
    up.add_argument("--token-lifetime", type=_token_lifetime, metavar="DURATION",
                    help="how long a user's sign-in (det user login, the web UI) lasts: "
                         "168h, 7d, 30m, 90s... (default 7d, as Determined's sessions; "
                         "the master's own token, det master up's, lasts)")
    slurm = up.add_argument_group("slurm", "with --resource-manager slurm")
    slurm.add_argument("--partition", help="the partition to submit to (default: Slurm's)")
    slurm.add_argument("--account", help="the account to charge")
    slurm.add_argument("--slurm-option", action="append", default=[], metavar="OPTION",
                       help="an extra sbatch option, e.g. --slurm-option=--qos=high "
                            "(repeatable)")
    up.set_defaults(func=_Lazy(master_cmd, "master_up"))
    down = m.add_parser("down", help="stop the master")
    down.set_defaults(func=_Lazy(master_cmd, "master_down"))
    status = m.add_parser("status", help="is the master up? (exit 3 if not)")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_Lazy(master_cmd, "master_status"))
    # Determined's `det master info` and `det master logs`
    info = m.add_parser("info", help="the master's address, version and slots")
    info.add_argument("--json", action="store_true")
    info.add_argument("--yaml", action="store_true", help="YAML (the default)")
    info.set_defaults(func=_Lazy(master_cmd, "master_info"))
    logs = m.add_parser("logs", help="the master's own log")
    logs.add_argument("-f", "--follow", action="store_true", help="until interrupted")
    logs.add_argument("--tail", type=int, metavar="N", help="the last N lines")
    logs.set_defaults(func=_Lazy(master_cmd, "master_logs"))
    config = m.add_parser("config", help="refused: det_sdk's master has no config file")
    config.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    config.set_defaults(func=refusal("det master config: det_sdk's master takes its "
                                      "settings as `det master up` options (det master up "
                                      "--help); `det master info` shows them"))
    for q in (up, down, status):
        q.add_argument("--data-dir", help="state, logs, checkpoints (default ~/.det/master, "
                                           "or DET_MASTER_DIR)")


def _add_ui_commands(sub: argparse._SubParsersAction) -> None:
    """``ui`` and ``tensorboard`` (handlers in det_sdk.cli.ui_cmd)."""
    p = sub.add_parser("ui", help="print a link that signs this browser in to the web UI")
    p.add_argument("--open", action="store_true", help="also open it in the default browser")
    p.set_defaults(func=_Lazy("det_sdk.cli.ui_cmd", "ui"))

    _add_tensorboard_commands(sub)


def _add_tensorboard_commands(sub: argparse._SubParsersAction) -> None:
    """Determined's ``det tensorboard start|list|kill|open|logs`` (the master runs it:
    det_sdk.cli.tensorboard_cmd), and det_sdk's ``det tensorboard run`` (this process runs
    it until Ctrl-C, over experiments or a local runs directory: det_sdk.cli.ui_cmd)."""
    tb_cmd = "det_sdk.cli.tensorboard_cmd"
    tb = sub.add_parser("tensorboard", help="TensorBoard over experiments' trials (or local runs)",
                        description="TensorBoard over the event files of trials: `start` asks "
                        "the master to run one (Determined's), `run` runs one here until "
                        "Ctrl-C (also over local runs: --runs-dir).")
    old_error = tb.error

    def error(message: str) -> Any:
        # `det tensorboard 3` was det_sdk's foreground form before Determined's verbs
        if "invalid choice" in message:
            message += ("; TensorBoard over experiments: det tensorboard start EXP_ID... "
                        "(the master runs it) or det tensorboard run EXP_ID... (here, until "
                        "Ctrl-C)")
        return old_error(message)

    tb.error = error  # type: ignore[method-assign,unused-ignore]  # argparse: no hook
    verbs = tb.add_subparsers(dest="action", metavar="ACTION")
    start = verbs.add_parser("start", help="the master starts a TensorBoard; prints its URL")
    start.add_argument("experiment_ids", metavar="EXP_ID", type=int, nargs="*",
                       help="experiments whose trials to show (every trial)")
    start.add_argument("-t", "--trial-ids", type=int, nargs="+", metavar="TRIAL_ID",
                       help="trials to show (at most 100 in all)")
    start.add_argument("--config-file", help="a TensorBoard config (.yaml): `description`")
    start.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                       help="a config value, e.g. description=mine")
    start.add_argument("--no-browser", action="store_true",
                       help="do not open it in a browser once it serves")
    start.add_argument("-d", "--detach", action="store_true",
                       help="print its id at once, without waiting for it to serve")
    start.add_argument("-c", "--context", **refused(
        "TensorBoard reads the trials' event files; no files are sent to it", True))
    start.add_argument("-i", "--include", **refused(
        "TensorBoard reads the trials' event files; no files are sent to it", True))
    start.set_defaults(func=_Lazy(tb_cmd, "start"))
    ls = verbs.add_parser("list", aliases=["ls"], help="the TensorBoards the master runs "
                          "(and ran)")
    ls.add_argument("-q", "--quiet", action="store_true", help="only the ids")
    ls.add_argument("-a", "--all", action="store_true",
                    help="all users' (det_sdk's master has one user: the same list)")
    fmt = ls.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable output")
    fmt.add_argument("--csv", action="store_true", help="comma-separated values")
    ls.set_defaults(func=_Lazy(tb_cmd, "list_tensorboards"))
    kill = verbs.add_parser("kill", help="stop TensorBoards")
    kill.add_argument("tensorboard_id", nargs="+", help="their ids (or unique beginnings)")
    kill.add_argument("-f", "--force", action="store_true", help="go on past errors")
    kill.set_defaults(func=_Lazy(tb_cmd, "kill"))
    opened = verbs.add_parser("open", help="print and open a running TensorBoard's URL")
    opened.add_argument("tensorboard_id", help="its id (or a unique beginning)")
    opened.set_defaults(func=_Lazy(tb_cmd, "open_tensorboard"))
    logs = verbs.add_parser("logs", help="what a TensorBoard printed")
    logs.add_argument("tensorboard_id", help="its id (or a unique beginning)")
    from det_sdk.cli.logs_cmd import LOG_OPTIONS

    for name, options in LOG_OPTIONS:
        logs.add_argument(*(name if isinstance(name, tuple) else (name,)), **options)
    logs.set_defaults(func=_Lazy(tb_cmd, "logs"))
    for verb in ("config", "set"):
        no = verbs.add_parser(verb, help=f"refused: det tensorboard {verb}")
        no.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
        no.set_defaults(func=refusal(
            f"det tensorboard {verb}: det_sdk's TensorBoards have no config beyond their "
            "description (det tensorboard list shows it) and no priorities"))

    run = verbs.add_parser("run", help="det_sdk's: run TensorBoard here until Ctrl-C",
                           description="Start TensorBoard in this process over the event "
                           "files the trials of EXP_ID... wrote (cluster), or over --runs-dir "
                           "(local runs); prints its URL and runs until interrupted.")
    run.add_argument("experiment_ids", metavar="EXP_ID", type=int, nargs="*",
                     help="experiments whose trials to show")
    run.add_argument("--runs-dir", help="local runs instead (python train.py): e.g. det-runs")
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=6006,
                     help="default 6006; 0: a free port TensorBoard binds itself")
    run.set_defaults(func=_Lazy("det_sdk.cli.ui_cmd", "tensorboard"))


def build_parser(words: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every ``det`` command; with ``words`` (a command line's), the
    actions of a master's nouns (``experiment list``, ``job kill``...) only for a noun
    among them: ``det --help`` and ``det master up`` then build 20 parsers, not 72 (each
    costs argparse about 0.4 ms, most of it looking for gettext translations), and
    ``det experiment list`` 45. The command line parses the same either way.

    >>> build_parser(["experiment", "list"]).parse_args(["experiment", "list"]).limit
    200
    """
    parser = argparse.ArgumentParser(
        prog="det",
        description="det_sdk: train Keras models locally, under Horovod, or on a cluster.",
    )
    parser.add_argument("-v", "--version", action="version",
                        version=f"det_sdk {det_sdk.__version__}")
    parser.add_argument("-m", "--master", default=setting("DET_MASTER") or DEFAULT_MASTER,
                        help=f"the master's URL, or host:port for http://host:port "
                             f"(DET_MASTER; default {DEFAULT_MASTER})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_master_commands(sub)
    _add_task_commands(sub, None if words is None else set(words))
    _add_ui_commands(sub)  # det ui, det tensorboard (issue 12)

    ver = sub.add_parser("version", help="the client's and the master's versions")
    ver.set_defaults(func=_Lazy("det_sdk.cli.version_cmd", "version"))

    runs = sub.add_parser("runs", help="local runs (python train.py on this machine)")
    runs_sub = runs.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = runs_sub.add_parser("list", help="list local runs with their progress")
    ls.add_argument("--runs-dir", default="det-runs", help="default: ./det-runs")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=_runs_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words)
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        noun = _NOUN_OF.get(args.command or "", args.command)
        if noun in DEFAULT_VERBS and getattr(args, "action", None) is None:
            # a bare noun runs its default verb, as Determined's `det e` lists experiments
            words.append(DEFAULT_VERBS[noun])
            args = parser.parse_args(words)
        else:
            parser.print_help()
            return 2
    try:
        from det_sdk._master_url import master_url

        if args.command != "runs":  # local runs never talk to a master
            args.master = master_url(args.master)  # Determined's host:port: http://host:port
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe is caught below, not at exit
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `det ... | head -1`: the reader is gone. Quiet, as Unix tools are (they die of
        # SIGPIPE: 128 + 13); stdout goes to /dev/null so that Python's flush at exit
        # does not fail on the closed pipe again
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (DetSdkError, OSError) as err:
        # what det_sdk refuses (ConfigError, UsageError, MasterError, MasterUnreachable...)
        # or a file it cannot read or write: the message says it all. Anything else (a
        # KeyError, a TypeError) is a bug and shows as one, with its traceback.
        from det_sdk.cli.render import escape

        # a master's message may echo a name or a config value: printed inert
        print(f"det: error: {escape(err, multiline=True)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
