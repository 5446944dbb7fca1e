"""``det experiment|trial|checkpoint|job ...``: talking to a master."""

from __future__ import annotations

import sys
import time
from argparse import Namespace
from pathlib import Path

from det_sdk.cli.argtypes import whole_number
from det_sdk.cli.render import escape, page_footer, print_json, progress_bar, table
from det_sdk.errors import UsageError

# `det --help` imports this module for COMMANDS: what a command needs beyond it (tarfile,
# httpx, pydantic, typing) is imported when it runs (scripts/bench/bench_import.py)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    #: noun -> verb -> (the command, its help, its arguments: (name,) or (name, options))
    Command = tuple[Callable[[Namespace], int], str, list[tuple[Any, ...]]]
    #: a verb is a command, or a group of them (`det e set name`)
    CommandTable = dict[str, dict[str, Command | dict[str, Command]]]

__all__ = ["COMMANDS"]

TERMINAL = ("COMPLETED", "CANCELED", "ERROR")
LIST_LIMIT = 20  # rows a `det ... list` shows unless asked for more (--limit, --all)
DESCRIBE_LIMIT = 100  # trials `det experiment describe` shows (the master's first page)
METRICS_LIMIT = 1000  # metric reports `det trial describe` shows


_positive_int = whole_number(1)  # an argparse type=


# --all / --limit of the list commands (argparse options, see det_sdk.cli.main)
_ALL = ("--all", {"action": "store_true", "help": "show every row (follows the master's pages)"})
_LIMIT = ("--limit", {"type": _positive_int, "default": LIST_LIMIT, "metavar": "N",
                      "help": f"show the newest N (default {LIST_LIMIT})"})


def _newest(client: Any, path: str, key: str, args: Namespace,
            **params: Any) -> tuple[list[dict[str, Any]], int]:
    """The newest ``--limit`` rows of a list (all with ``--all``, page after page), oldest
    first as a terminal shows them (the newest beside the prompt), and how many there are."""
    limit = None if args.all else args.limit
    rows: list[dict[str, Any]] = []
    cursor, total = None, None
    while True:
        size = 1000 if limit is None else min(limit - len(rows), 1000)  # the master's max
        page = client.page(path, size, cursor, **params)
        total = page["total"] if total is None else total
        rows += page[key]
        cursor = page["next_cursor"]
        if cursor is None or (limit is not None and len(rows) >= limit):
            return rows[::-1], total


def _client(args: Namespace) -> Any:
    from det_sdk.client import MasterClient, load_token

    token = load_token(args.master)
    if token is None:
        raise UsageError(f"no token for {args.master}: start it with `det master up`, or set "
                         "DET_USER_TOKEN")
    return MasterClient(args.master, token)


def _read_config(path: str, kind: str) -> dict[str, Any]:
    from det_sdk.config import (
        ConfigError,
        load_yaml_file,
        parse_experiment_config,
        parse_job_config,
        resolve_host_path,
    )

    raw = load_yaml_file(path)
    if not isinstance(raw, dict):
        # a file holding one string is not the name of another config file
        raise ConfigError(f"invalid {kind} config {path}: expected a mapping at the top "
                          f"level, got {type(raw).__name__}")
    if kind == "experiment":
        # the master refuses a relative host_path (it would be under each trial's
        # working directory): the config file's directory is what its author meant
        raw, resolved = resolve_host_path(raw, Path(path).parent)
        if resolved:
            print(f"checkpoint_storage.host_path: resolved against {path}'s directory: "
                  f"{resolved}", file=sys.stderr)
    # Validate here first: a bad config fails before anything is packed or sent.
    (parse_experiment_config if kind == "experiment" else parse_job_config)(raw)
    return raw


def _num(v: Any) -> str:
    """A metric for people: 4 significant digits; NaN and infinities as they are."""
    return f"{v:.4g}" if isinstance(v, (int, float)) else str(v)


def _pack(directory: str) -> bytes:
    from det_sdk.master.archive import ArchiveTooLargeError, pack

    d = Path(directory)
    if not d.is_dir():
        raise UsageError(f"model directory {directory!r} does not exist or is not a directory")
    try:  # stops as soon as a limit is passed: bounded memory and time
        return pack(d)
    except ArchiveTooLargeError as err:
        raise UsageError(f"{directory} {err}, over the master's limit of {err.limit}; leave "
                         "data sets out of the model directory") from None


def _follow(client: Any, kind: str, task_id: int, done: Any) -> str:
    """Print a task's log as it grows until ``done()`` returns a final state."""
    offset = 0
    while True:
        state = done()
        chunk = client.logs(kind, task_id, offset)
        if chunk["text"]:
            sys.stdout.write(chunk["text"])
            sys.stdout.flush()
        offset = chunk["offset"]
        if state in TERMINAL and not chunk["text"]:
            return state
        time.sleep(0.5)


# --- experiments ----------------------------------------------------------------------------


# TARGET: the length the searcher has the trial train to (ASHA: its current rung)
_TRIAL_HEADERS = ["TRIAL", "STATE", "BATCHES", "EPOCHS", "TARGET", "BEST", "RESTARTS", "HPARAMS"]


def _trial_rows(trials: list[dict[str, Any]]) -> list[list[Any]]:
    from det_sdk.hparams import flat_hparams

    def target(t: dict[str, Any]) -> str:
        op = t.get("searcher_length")
        if not op:
            return ""
        one = {"epochs": "epoch", "batches": "batch"}[op["unit"]]
        return f"{op['length']} {one if op['length'] == 1 else op['unit']}"

    def value(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    # QUEUED in a resource manager's queue (Slurm) shows why: "QUEUED (Resources)"
    return [[t["id"], f"{t['state']} ({t['queue_reason']})" if t.get("queue_reason")
             else t["state"], t["steps_completed"], t["epoch"], target(t),
             "" if t["best_metric"] is None else _num(t["best_metric"]),
             t["restarts"],
             # nested hyperparameters by dotted name (--json keeps them nested)
             " ".join(f"{k}={value(v)}" for k, v in flat_hparams(t["hparams"]).items())]
            for t in trials]


def experiment_describe(args: Namespace) -> int:
    exp = _client(args).experiment(args.id, all_trials=args.all)
    if args.json:
        print_json(exp)
        return 0
    searcher = (exp["config"].get("searcher") or {})
    print(f"Experiment {exp['id']} {escape(exp['name'] or '')}: {exp['state']}, "
          f"{100 * exp['progress']:.0f}% (searcher {searcher.get('name', 'single')}, "
          f"metric {searcher.get('metric', 'val_loss')})")
    print(table(_TRIAL_HEADERS, _trial_rows(exp["trials"])))
    footer = page_footer(len(exp["trials"]), exp["num_trials"], "trials", newest=False)
    if footer:
        print(footer)
    for t in exp["trials"]:
        if t.get("checkpoint_note"):
            print(f"\ntrial {t['id']}: {escape(t['checkpoint_note'], multiline=True)}")
        if t["last_error"]:
            print(f"\ntrial {t['id']}: {escape(t['last_error'], multiline=True)}")
    return 0


def experiment_wait(args: Namespace) -> int:
    client = _client(args)

    def state() -> str:
        return client.experiment(args.id)["state"]

    if getattr(args, "logs", False):
        trials = client.trials(args.id)
        for t in trials:
            _follow(client, "trials", t["id"], lambda tid=t["id"]: client.trial(tid)["state"])
    final = state()
    while final not in TERMINAL:
        time.sleep(getattr(args, "polling_interval", 0.5))
        final = state()
    print(f"experiment {args.id}: {final}", file=sys.stderr)
    if final != "COMPLETED":
        _print_trial_errors(client, args.id)
    return 0 if final == "COMPLETED" else 1


def _print_trial_errors(client: Any, exp_id: int, limit: int = 3) -> None:
    """The root cause of each failed trial (its last_error's first paragraph), to stderr."""
    failed = [t for t in client.trials(exp_id) if t["state"] == "ERROR" and t["last_error"]]
    for t in failed[:limit]:
        lead = escape(t["last_error"].split("\n\n", 1)[0], multiline=True)
        print(f"trial {t['id']}: {lead}\n  (det trial describe {t['id']} for the rest)",
              file=sys.stderr)
    if len(failed) > limit:
        print(f"... and {len(failed) - limit} more failed trials", file=sys.stderr)


def experiment_kill(args: Namespace) -> int:
    out = _client(args).kill_experiment(args.id)
    print(f"experiment {args.id}: {out['state']}")
    return 0


def experiment_pause(args: Namespace) -> int:
    out = _client(args).pause_experiment(args.id)
    note = (" (running trials checkpoint and stop; PAUSED once all have)"
            if out["state"] == "STOPPING_PAUSED" else "")
    print(f"experiment {args.id}: {out['state']}{note}")
    return 0


def experiment_activate(args: Namespace) -> int:
    out = _client(args).activate_experiment(args.id)
    print(f"experiment {args.id}: {out['state']}")
    return 0


# --- trials -----------------------------------------------------------------------------------


def trial_describe(args: Namespace) -> int:
    client = _client(args)
    t = client.trial(args.id)
    limit = None if args.all else METRICS_LIMIT
    metrics = client.trial_metrics(args.id, limit=limit)
    # several fits in the script (det_sdk.stages): each stage's series after the default's
    stages = t.get("stages") or []
    staged = len(stages) > 1 or any(s["name"] != "fit" for s in stages)
    for s in stages:
        if s["name"] != "fit":
            metrics += client.trial_metrics(args.id, limit=limit, stage=s["name"])
    if args.json:
        print_json({**t, "metrics": metrics})
        return 0
    print(table(_TRIAL_HEADERS, _trial_rows([t])))
    if staged:
        print()
        print(table(["STAGE", "STATE", "SEARCHED", "BATCHES", "EPOCHS", "BEST",
                     "LAST CHECKPOINT"],
                    [[s["name"], s["state"], "yes" if s["searched"] else "",
                      s["steps_completed"], s["epoch"],
                      _num(s["best_metric"]) if s["best_metric"] is not None else "",
                      s["latest_checkpoint"] or ""] for s in stages]))
    rows = [([m.get("stage") or "fit"] if staged else []) + [
        m["group"], m["steps_completed"], m["epoch"],
        " ".join(f"{k}={_num(v)}" for k, v in m["metrics"].items())] for m in metrics]
    if rows:
        print()
        print(table((["STAGE"] if staged else []) + ["GROUP", "BATCHES", "EPOCH", "METRICS"],
                    rows))
        if not args.all and len(metrics) >= METRICS_LIMIT:
            print(f"showing the first {len(metrics)} metric reports; --all for everything")
    if t.get("checkpoint_note"):
        print(f"\n{escape(t['checkpoint_note'], multiline=True)}")
    if t["last_error"]:
        print(f"\n{escape(t['last_error'], multiline=True)}")
    return 0


def _print_logs(args: Namespace, kind: str) -> int:
    """A trial's or job's log; with --follow, until it ends (exit 0 if it completed)."""
    client = _client(args)
    if args.follow:
        state = client.trial if kind == "trials" else client.job
        final = _follow(client, kind, args.id, lambda: state(args.id)["state"])
        return 0 if final == "COMPLETED" else 1
    sys.stdout.write(client.logs(kind, args.id)["text"])
    return 0


# --- checkpoints ------------------------------------------------------------------------------


def checkpoint_list(args: Namespace) -> int:
    rows, total = _newest(_client(args), "/api/v1/checkpoints", "checkpoints", args,
                          trial_id=args.trial)
    if args.json:
        print_json(rows)
        return 0
    print(table(["UUID", "TRIAL", "BATCHES", "EPOCH", "SIZE", "METRICS"],
                [[c["uuid"] + (" (damaged)" if c.get("damaged") else ""), c["trial_id"],
                  c["steps_completed"], c["epoch"], c["size"],
                  " ".join(f"{k}={_num(v)}" for k, v in c["metrics"].items())] for c in rows]))
    footer = page_footer(len(rows), total, "checkpoints")
    if footer:
        print(footer)
    return 0


def _download(fetch: Any, what: str, directory: str) -> Path:
    """Stream an archive (``fetch(file)`` writes it) to a temporary file beside
    ``directory``, unpack it into a temporary directory there, then move what it holds
    into ``directory``: a download that fails (the master goes, the archive is cut short)
    leaves nothing behind and says what happened, never a part of the files."""
    import gzip
    import os
    import shutil
    import tarfile
    import tempfile
    import zlib

    from det_sdk.errors import DetSdkError

    dest = Path(directory)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"dir: {dest} exists and is not a directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.download-", dir=dest.parent))
    try:
        archive = staging / "archive.tar.gz"
        with open(archive, "wb") as f:
            fetch(f)
        unpacked = staging / "files"
        unpacked.mkdir()
        try:
            with tarfile.open(archive, mode="r:gz") as tar:
                if hasattr(tarfile, "data_filter"):  # 3.12, 3.11.4+: no links out, devices
                    tar.extractall(unpacked, filter="data")
                else:
                    tar.extractall(unpacked)
        except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as err:
            raise DetSdkError(f"the {what} sent by the master is not a whole .tar.gz "
                              f"({archive.stat().st_size} bytes received; {err}): the "
                              "transfer was cut short; nothing was written to "
                              f"{dest}") from None
        dest.mkdir(exist_ok=True)
        for item in sorted(unpacked.iterdir()):
            target = dest / item.name
            if target.is_dir() and not target.is_symlink() and item.is_dir():
                shutil.copytree(item, target, dirs_exist_ok=True)
            else:
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                os.replace(item, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def _files_download(args: Namespace, kind: str) -> int:
    """The files a trial or job wrote into its working directory (kept when it ended;
    while they are still being copied the master answers 409: asked again)."""
    client = _client(args)
    dest = _download(lambda f: client.download_files_to(kind, args.id, f),
                     f"files of {kind[:-1]} {args.id}", args.dir)
    print(f"{kind[:-1]} {args.id} files -> {dest}")
    return 0


def trial_files(args: Namespace) -> int:
    return _files_download(args, "trials")


def job_download(args: Namespace) -> int:
    return _files_download(args, "jobs")


# --- jobs -------------------------------------------------------------------------------------


def job_run(args: Namespace) -> int:
    config = _read_config(args.config, "job")
    archive = _pack(args.model_dir)
    client = _client(args)
    job_id = client.create_job(config, archive, progress_bar("uploading directory"))
    print(f"Created job {job_id}")
    if args.follow:
        final = _follow(client, "jobs", job_id, lambda: client.job(job_id)["state"])
        print(f"job {job_id}: {final}", file=sys.stderr)
        return 0 if final == "COMPLETED" else 1
    return 0


def job_progress_text(progress: float | None) -> str:
    """A job's progress in a table: ``42.0%``; ``-`` while its total is unknown.

    >>> job_progress_text(0.4204), job_progress_text(None)
    ('42.0%', '-')
    """
    return "-" if progress is None else f"{100 * progress:.1f}%"


def _duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12s``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def job_rows(jobs: list[dict[str, Any]]) -> list[list[Any]]:
    """``det job list``'s rows (summaries of GET /api/v1/jobs)."""
    return [[j["id"], j["name"] or "", j["state"], job_progress_text(j.get("progress")),
             j["exit_code"], j["entrypoint"]] for j in jobs]


JOB_HEADERS = ["ID", "NAME", "STATE", "PROGRESS", "EXIT", "ENTRYPOINT"]


def job_list(args: Namespace) -> int:
    jobs, total = _newest(_client(args), "/api/v1/jobs", "jobs", args)
    if args.json:
        print_json(jobs)
        return 0
    print(table(JOB_HEADERS, job_rows(jobs)))
    footer = page_footer(len(jobs), total, "jobs")
    if footer:
        print(footer)
    return 0


def job_logs(args: Namespace) -> int:
    return _print_logs(args, "jobs")


def job_describe_lines(j: dict[str, Any]) -> list[str]:
    """``det job describe``: one ``field: value`` line each (GET /api/v1/jobs/{id})."""
    rows = "-" if j.get("rows_done") is None else (
        f"{j['rows_done']} of {j['rows_total'] if j.get('rows_total') is not None else '?'}")
    rate = j.get("rows_per_second")
    return [f"job {j['id']}" + (f" ({j['name']})" if j.get("name") else ""),
            f"  state:     {j['state']}" + (f" (exit code {j['exit_code']})"
                                            if j.get("exit_code") else ""),
            f"  progress:  {job_progress_text(j.get('progress'))}",
            f"  rows:      {rows}",
            f"  rows/s:    {'-' if rate is None else f'{rate:.4g}'}",
            f"  time left: {_duration(j.get('eta_seconds'))}",
            f"  output:    {j.get('output') or '-'}",
            f"  restarts:  {j.get('restarts', 0)} of "
            f"{(j.get('config') or {}).get('max_restarts', 0)}",
            # the job script's report_metrics: each group's latest report
            *(f"  {escape(group)}: " + ", ".join(f"{escape(k)}={_metric_text(v)}"
                                         for k, v in m["metrics"].items())
              + f" (step {m['steps_completed']})"
              for group, m in (j.get("latest_metrics") or {}).items())]


def _metric_text(v: Any) -> str:
    """A metric as the describe line shows it: 4 significant digits; NaN and the
    infinities as the wire's strings.

    >>> _metric_text(0.123456), _metric_text("NaN"), _metric_text(3)
    ('0.1235', 'NaN', '3')
    """
    return f"{v:.4g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def job_describe(args: Namespace) -> int:
    j = _client(args).job(args.id)
    if args.json:
        print_json(j)
        return 0
    # what the job and its script sent (a name, an output path) may hold control characters
    print("\n".join(escape(line) for line in job_describe_lines(j)))
    return 0


def _job_command(args: Namespace, command: str, notes: dict[str, str]) -> int:
    out = _client(args).job_command(args.id, command)
    if args.json:
        print_json(out)
        return 0
    print(f"job {args.id}: {out['state']}{notes.get(out['state'], '')}")
    return 0


def job_pause(args: Namespace) -> int:
    return _job_command(args, "pause", {"STOPPING_PAUSED": " (it stops at its next progress "
                                        "checkpoint; PAUSED once it has)"})


def job_activate(args: Namespace) -> int:
    return _job_command(args, "activate", {"STOPPING_PAUSED": " (still stopping: it runs "
                                           "again once stopped)"})


def job_kill(args: Namespace) -> int:
    return _job_command(args, "kill", {"STOPPING_CANCELED": " (its process is being "
                                       "stopped; CANCELED once it has exited)"})


from det_sdk.cli import experiment_cmd as _x  # noqa: E402
from det_sdk.cli import session_cmd as _s  # noqa: E402
from det_sdk.cli.logs_cmd import LOG_OPTIONS as _LOG  # noqa: E402
from det_sdk.cli.main import refused as _refused  # noqa: E402
from det_sdk.cli.model_cmd import COMMANDS as _MODEL_COMMANDS  # noqa: E402

_FILES_DIR = ("dir", {"help": "where to put the files"})
_ID = ("id", {"type": int, "help": "the experiment's id"})
_TRIAL = ("trial_id", {"type": int, "help": "the trial's id"})
_YES = ("--yes", {"action": "store_true", "help": "do not ask for confirmation"})
_CSV = ("--csv", {"action": "store_true", "help": "print as CSV"})
_QUIET = (("-q", "--quiet"), {"action": "store_true", "help": "print only the path"})
_SORT = [("--sort-by", {"help": "a validation metric to rank by (default: the searcher's)"}),
         ("--smaller-is-better", {"type": _x.bool_text, "metavar": "(true|false)",
                                  "help": "with --sort-by: its order"})]
# Determined's pagination (harness/determined/cli/_util.py): --limit is a page size and
# every page is read unless --pages 1
_PAGES = [("--limit", {"type": _positive_int, "default": 200, "metavar": "N",
                       "help": "rows per request (every page is read unless --pages 1)"}),
          ("--offset", {"type": int, "default": 0, "help": "rows to skip"}),
          ("--pages", {"choices": ["all", "1"], "default": "all",
                       "help": "all (default): every page; 1: one page of --limit rows"})]
_NO_SCHEDULER = ("det_sdk schedules trials first come, first served on its slots: it has no "
                 "{what} (Determined's {scheduler} scheduler). Order work by when you create "
                 "it, or pause (det e pause) what should wait")


def _refuse_verb(why: str) -> Any:
    """A Determined verb det_sdk cannot do: its handler says why and what to use instead."""
    def run(args: Namespace) -> int:
        raise UsageError(why)

    run.refusal = why  # type: ignore[attr-defined]  # what the compat table reads
    return run


def _set_refused(what: str, scheduler: str) -> tuple[Any, str, list[tuple[Any, ...]]]:
    return (_refuse_verb(_NO_SCHEDULER.format(what=what, scheduler=scheduler)),
            f"refused: no {what} in det_sdk's scheduler",
            [_ID, ("value", {"help": "the value Determined would set"})])


COMMANDS: CommandTable = {
    "experiment": {
        "create": (_x.experiment_create, "submit an experiment: CONFIG [DIR]", [
            ("config_file", {"help": "experiment config file (.yaml)"}),
            ("model_def", {"nargs": "?", "help": "the directory to upload (default: none)"}),
            ("--config", {"action": "append", "default": [], "metavar": "KEY=VALUE",
                          "help": "a config setting over the file's, e.g. "
                                  "searcher.max_length.epochs=2"}),
            (("-f", "--follow-first-trial"), {"action": "store_true",
                                              "help": "follow the first trial's log"}),
            ("--paused", {"action": "store_true", "help": "do not activate the experiment"}),
            (("-t", "--test-mode"), {"action": "store_true",
                                     "help": "a one-trial run of one scheduling unit, "
                                             "followed, then archived"}),
            (("-i", "--include"), _refused("det_sdk uploads one directory: put the extra "
                                           "files in the model directory", True)),
            ("--local", _refused("run the script on this machine instead: python train.py "
                                 "(docs/local-runs.md)")),
            ("--template", _refused("det_sdk has no config templates: merge the template "
                                    "into the config file", True)),
            ("--project_id", _refused("det_sdk has no workspaces or projects", True)),
            (("-p", "--publish"), _refused("det_sdk does not publish task ports: a task's "
                                           "ports are on the machine it runs on", True)),
        ]),
        "continue": (_x.experiment_continue, "train an ended single-searcher experiment's "
                     "trial further from its latest checkpoint (same ids), e.g. --config "
                     "searcher.max_length.epochs=5; a grid or random search: its unfinished "
                     "trials again", [
            ("id", {"type": int, "help": "the experiment's id (COMPLETED, CANCELED, ERROR)"}),
            ("--config-file", {"metavar": "FILE", "help": "an override config (.yaml) merged "
                                                          "over the experiment's"}),
            ("--config", {"action": "append", "default": [], "metavar": "KEY=VALUE",
                          "help": "a setting over the experiment's config, e.g. "
                                  "searcher.max_length.epochs=5"}),
            (("-f", "--follow-first-trial"), {"action": "store_true",
                                              "help": "follow the continued trial's log"})]),
        "list": (_x.experiment_list, "list experiments (all of them; archived with --all)", [
            (("--all", "-a"), {"action": "store_true", "help": "archived ones too"}),
            ("--show_project", _refused("det_sdk has no workspaces or projects")),
            *_PAGES, _CSV]),
        "describe": (_x.experiment_describe, "trials, states and metrics: IDS (1,2,3)", [
            ("experiment_ids", {"help": "comma-separated experiment ids"}),
            ("--all", {"action": "store_true",
                       "help": f"every trial (default: the first {DESCRIBE_LIMIT})"}),
            ("--metrics", _refused("det_sdk's describe shows each trial's best metric; every "
                                   "report: det trial describe TRIAL_ID")),
            ("--csv", _refused("det e describe --json, or det e lt ID --csv")),
            ("--outdir", _refused("redirect the output: det e describe ID --json > FILE",
                                  True))]),
        "config": (_x.experiment_config, "its config (YAML)", [_ID]),
        "logs": (_x.experiment_logs, "the first trial's log (det t logs for the others)",
                 [_ID, *_LOG]),
        "list-trials": (_x.experiment_list_trials, "its trials", [_ID, *_PAGES, _CSV]),
        "list-checkpoints": (_x.experiment_list_checkpoints, "its checkpoints", [
            _ID, ("--best", {"type": int, "metavar": "N",
                             "help": "the best N by the searcher metric"}), _CSV]),
        "wait": (experiment_wait, "wait until it ends (exit 0 if COMPLETED)", [
            _ID, ("--polling-interval", {"type": float, "default": 0.5,
                                         "help": "seconds between checks (default 0.5; "
                                                 "Determined's: 5)"})]),
        "kill": (experiment_kill, "stop its trials now (CANCELED)", [("id",)]),
        "cancel": (_x.experiment_cancel, "ask its trials to stop (CANCELED)", [_ID]),
        "pause": (experiment_pause, "checkpoint and stop its trials (PAUSED)", [("id",)]),
        "activate": (experiment_activate, "continue a paused experiment", [("id",)]),
        "archive": (_x.experiment_archive, "hide an ended experiment from `e list`", [_ID]),
        "unarchive": (_x.experiment_unarchive, "show it in `e list` again", [_ID]),
        "delete": (_x.experiment_delete, "delete it with its checkpoints and logs",
                   [_ID, _YES]),
        "download": (_x.experiment_download, "the best checkpoints of its top-N trials", [
            _ID, (("-o", "--output-dir"), {"default": "checkpoints",
                                           "help": "checkpoints go to OUTPUT_DIR/UUID"}),
            ("--top-n", {"type": int, "default": 1, "help": "how many trials' best"}),
            *_SORT, _QUIET]),
        "set": {
            "name": (_x.experiment_set_name, "set its name",
                     [_ID, ("name", {"help": "the new name"})]),
            "description": (_x.experiment_set_description, "set its description",
                            [_ID, ("description", {"help": "the new description"})]),
            "max-slots": _set_refused("max_slots", "fair-share"),
            "weight": _set_refused("weights", "fair-share"),
            "priority": _set_refused("priorities", "priority"),
        },
        "label": {
            "add": (_x.experiment_label_add, "add a label",
                    [_ID, ("label", {"help": "the label"})]),
            "remove": (_x.experiment_label_remove, "remove a label",
                       [_ID, ("label", {"help": "the label"})]),
        },
    },
    "trial": {
        "describe": (trial_describe, "state and metrics of a trial",
                     [("id",), ("--all", {"action": "store_true",
                                          "help": "every metric report (default: the first "
                                                  f"{METRICS_LIMIT})"}),
                      ("--metrics", _refused("det_sdk's describe always shows the metric "
                                             "reports (the first 1000; --all for every one)")),
                      ("--metrics-summary", _refused("det t describe shows each report; "
                                                     "--json for a script")),
                      ("--csv", _refused("det t describe ID --json"))]),
        "logs": (_x.trial_logs, "a trial's log", [_TRIAL, *_LOG]),
        "download": (_x.trial_download, "a checkpoint of the trial (--best, --latest, --uuid)",
                     [_TRIAL, ("--best", {"action": "store_true"}),
                      ("--latest", {"action": "store_true"}), ("--uuid", {}),
                      (("-o", "--output-dir"), {"help": "default: checkpoints/UUID"}),
                      *_SORT, _QUIET]),
        "files": (trial_files, "det_sdk's: copy the files the trial wrote into its working "
                  "directory into DIR (kept when it ended)", [("id",), _FILES_DIR]),
        "kill": (_x.trial_kill, "stop this trial now (CANCELED); the others go on", [_TRIAL]),
    },
    "checkpoint": {
        "list": (checkpoint_list, "det_sdk's: the newest checkpoints (--trial: of one)",
                 [("--trial",), _LIMIT, _ALL]),
        "describe": (_x.checkpoint_describe, "a checkpoint's trial, step, size, metrics",
                     [("uuid",)]),
        "download": (_x.checkpoint_download, "copy a checkpoint (default: checkpoints/UUID)",
                     [("uuid",), (("-o", "--output-dir"), {"help": "default: checkpoints/UUID"}),
                      _QUIET,
                      ("--mode", _refused("det_sdk downloads through the master only", True))]),
        "delete": (_x.checkpoint_delete, "delete checkpoints: UUIDS (a,b,c)",
                   [("checkpoints_uuids", {"help": "comma-separated UUIDs"}), _YES]),
    },
    "job": {
        "list": (_s.job_list, "the scheduler's queue: experiments and batch jobs waiting "
                 "for or holding slots", [
                     (("-p", "--resource-pool"), _refused("det_sdk has one pool of slots",
                                                          True)),
                     ("--limit", {"type": _positive_int, "default": 100, "metavar": "N",
                                  "help": "rows per page (every page unless --pages 1)"}),
                     ("--offset", {"type": int, "default": 0, "help": "rows to skip"}),
                     ("--pages", {"choices": ["all", "1"], "default": "all"}),
                     ("--reverse", {"action": "store_true", "help": "the last first"}),
                     ("--yaml", {"action": "store_true"}), ("--table", {"action": "store_true",
                                                                       "help": "the default"}),
                     _CSV]),
        "run": (job_run, "det_sdk's: run a generic job (batch inference): CONFIG DIR",
                [("config",), ("model_dir",), ("--follow",)]),
        "batches": (job_list, f"det_sdk's: list the newest batch jobs ({LIST_LIMIT}; --all)",
                    [_LIMIT, _ALL]),
        "logs": (job_logs, "a job's logs", [("id",), ("--follow",)]),
        "describe": (job_describe, "state, progress (rows, rows/s, time left), output and "
                     "restarts of a job", [("id",)]),
        "pause": (job_pause, "stop it at its next progress checkpoint (PAUSED)",
                  [("id",)]),
        "activate": (job_activate, "run a paused job again, from its progress",
                     [("id",)]),
        "kill": (job_kill, "stop its process (CANCELED)", [("id",)]),
        "download": (job_download, "copy the files the job wrote into its working "
                     "directory (e.g. predictions) into DIR", [("id",), _FILES_DIR]),
    },
    "model": {**_MODEL_COMMANDS},  # the master's model registry: det_sdk.cli.model_cmd
    "user": _s.USER_COMMANDS,
    "task": _s.TASK_COMMANDS,
}
