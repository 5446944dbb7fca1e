"""What the ``det`` nouns that talk to a master share: the client, the options several
verbs take, reading a config and packing a directory, following a log, downloading an
archive, the trial table, and the refusal of what det_sdk cannot do.

The layer under every noun's module (det_sdk.cli.experiment_cmd, trial_cmd, ...), which
import no other noun's: pyproject.toml's import-linter contract. Kept light: ``det
--help`` builds the nouns' tables from it (argparse only; typing for the type checker).

>>> parse_overrides({"a": {"b": 1}}, ["a.c=2", "d=x"])
{'a': {'b': 1, 'c': 2}, 'd': 'x'}
"""

from __future__ import annotations

import argparse
import sys
import time
from argparse import Namespace
from pathlib import Path

from det_sdk.cli.argtypes import whole_number
from det_sdk.errors import UsageError

TYPE_CHECKING = False  # typing costs `det --help` 4 ms: for the type checker only
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    #: noun -> verb -> (the command, its help, its arguments: (name,) or (name, options))
    Command = tuple[Callable[[Namespace], int], str, list[tuple[Any, ...]]]
    #: a verb is a command, or a group of them (`det e set name`)
    CommandTable = dict[str, Command | dict[str, Command]]

__all__ = ["TERMINAL", "bool_text", "connect", "download", "files_download", "pack_directory",
           "parse_ids", "parse_overrides", "read_config", "refusal", "refused"]

TERMINAL = ("COMPLETED", "CANCELED", "ERROR")
LIST_LIMIT = 20  # rows a `det ... list` shows unless asked for more (--limit, --all)
DESCRIBE_LIMIT = 100  # trials `det experiment describe` shows (the master's first page)
METRICS_LIMIT = 1000  # metric reports `det trial describe` shows

positive_int = whole_number(1)  # an argparse type=


# --- refusing what det_sdk cannot do ------------------------------------------------------------


class _Refused(argparse.Action):
    """A Determined option det_sdk cannot honour: parsing it stops with ``help`` (what
    Determined does with it and what to use instead), never a flag accepted and ignored."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("nargs", 0)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        parser.error(f"{option_string}: refused by det_sdk: {self.help}")


def refused(why: str, takes_value: bool = False) -> dict[str, object]:
    """The options of a refused Determined flag (see :class:`_Refused`).

    >>> refused("no ranks here")["help"]
    'no ranks here'
    """
    return {"action": _Refused, "help": why, "nargs": 1 if takes_value else 0,
            "default": argparse.SUPPRESS}


def refusal(why: str) -> Any:
    """A Determined command det_sdk cannot do: its handler says why and what to use
    instead (``refusal``: what the compat table, scripts/determined_cli_table.py, reads)."""
    def refuse(args: Namespace) -> int:
        raise UsageError(why)

    # (ignore: mypy types a function without attributes; a Protocol would hide its name)
    refuse.refusal = why  # type: ignore[attr-defined]
    return refuse


# --- options several verbs take (argparse: (names, options)) ------------------------------------

# --all / --limit of the list commands (argparse options, see det_sdk.cli.main)
ALL = ("--all", {"action": "store_true", "help": "show every row (follows the master's pages)"})
LIMIT = ("--limit", {"type": positive_int, "default": LIST_LIMIT, "metavar": "N",
                     "help": f"show the newest N (default {LIST_LIMIT})"})
FILES_DIR = ("dir", {"help": "where to put the files"})
ID = ("id", {"type": int, "help": "the experiment's id"})
TRIAL = ("trial_id", {"type": int, "help": "the trial's id"})
YES = ("--yes", {"action": "store_true", "help": "do not ask for confirmation"})
CSV = ("--csv", {"action": "store_true", "help": "print as CSV"})
QUIET = (("-q", "--quiet"), {"action": "store_true", "help": "print only the path"})


# --- the master -------------------------------------------------------------------------------


def connect(args: Namespace) -> Any:
    """The client of the master ``--master`` names, with its saved token (looked up by
    the nouns at each call, ``common.connect``: the tests stand a master in for it)."""
    from det_sdk.client import MasterClient, load_token

    token = load_token(args.master)
    if token is None:
        raise UsageError(f"no token for {args.master}: start it with `det master up`, or set "
                         "DET_USER_TOKEN")
    return MasterClient(args.master, token)


def newest(client: Any, path: str, key: str, args: Namespace,
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


def follow(client: Any, kind: str, task_id: int, done: Any) -> str:
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


def print_logs(args: Namespace, kind: str) -> int:
    """A trial's or job's log; with --follow, until it ends (exit 0 if it completed)."""
    client = connect(args)
    if args.follow:
        state = client.trial if kind == "trials" else client.job
        final = follow(client, kind, args.id, lambda: state(args.id)["state"])
        return 0 if final == "COMPLETED" else 1
    sys.stdout.write(client.logs(kind, args.id)["text"])
    return 0


def post(args: Namespace, path: str, message: str) -> int:
    """POST ``path`` to the master, then print ``message``."""
    connect(args).request("POST", path)
    print(message)
    return 0


def yes(args: Namespace, question: str) -> bool:
    """Whether to go on: ``--yes``, or the answer to ``question`` on a terminal."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError("this asks for confirmation and stdin is not a terminal: add --yes")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


# --- what is sent: configs, directories, ids -----------------------------------------------


def read_config(path: str, kind: str) -> dict[str, Any]:
    """The ``kind`` (experiment, job) config in the YAML file ``path``, validated."""
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


def task_config(args: Namespace, kind: str) -> dict[str, Any]:
    """A command's, shell's or notebook's config (``kind``): ``--config-file``, then
    ``--config`` over it, checked for its shape here (the master checks its fields).

    >>> task_config(Namespace(config_file=None, config=["description=x"]), "shell")
    {'description': 'x'}
    """
    from det_sdk.config import ConfigError, load_yaml_file

    config: dict[str, Any] = {}
    if args.config_file:
        loaded = load_yaml_file(args.config_file)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"invalid {kind} config {args.config_file}: expected a "
                              f"mapping at the top level, got {type(loaded).__name__}")
        config = loaded
    return parse_overrides(config, args.config or [])


def parse_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Determined's ``--config key.sub=value`` (the value read as YAML) applied to a
    config."""
    import yaml

    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--config {item!r}: expected KEY=VALUE, e.g. "
                             "--config resources.slots_per_trial=2")
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = yaml.safe_load(value)
    return config


def parse_ids(text: str, what: str = "experiment") -> list[int]:
    """Determined's comma-separated ids: ``1,2,3``.

    >>> parse_ids("1,2")
    [1, 2]
    """
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"{what} ids: expected whole numbers separated by commas (1,2,3), "
                         f"got {text!r}") from None
    if any(i < 0 for i in ids):
        raise UsageError(f"{what} ids: expected ids of 0 or more, got {text!r}")
    return ids


def bool_text(text: str) -> bool:
    """Determined's ``(true|false)`` flag values."""
    lowered = text.lower()
    if lowered in ("true", "t", "yes", "y", "1", "on"):
        return True
    if lowered in ("false", "f", "no", "n", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def pack_directory(directory: str) -> bytes:
    """The model directory as the archive the master takes (refused past its limit)."""
    from det_sdk.master.archive import ArchiveTooLargeError, pack

    d = Path(directory)
    if not d.is_dir():
        raise UsageError(f"model directory {directory!r} does not exist or is not a directory")
    try:  # stops as soon as a limit is passed: bounded memory and time
        return pack(d)
    except ArchiveTooLargeError as err:
        raise UsageError(f"{directory} {err}, over the master's limit of {err.limit}; leave "
                         "data sets out of the model directory") from None


SORT = [("--sort-by", {"help": "a validation metric to rank by (default: the searcher's)"}),
        ("--smaller-is-better", {"type": bool_text, "metavar": "(true|false)",
                                 "help": "with --sort-by: its order"})]
# Determined's pagination (harness/determined/cli/_util.py): --limit is a page size and
# every page is read unless --pages 1
PAGES = [("--limit", {"type": positive_int, "default": 200, "metavar": "N",
                      "help": "rows per request (every page is read unless --pages 1)"}),
         ("--offset", {"type": int, "default": 0, "help": "rows to skip"}),
         ("--pages", {"choices": ["all", "1"], "default": "all",
                      "help": "all (default): every page; 1: one page of --limit rows"})]


# --- what comes back: tables, checkpoints, files ---------------------------------------------


def num(v: Any) -> str:
    """A metric for people: 4 significant digits; NaN and infinities as they are."""
    return f"{v:.4g}" if isinstance(v, (int, float)) else str(v)


# TARGET: the length the searcher has the trial train to (ASHA: its current rung)
TRIAL_HEADERS = ["TRIAL", "STATE", "BATCHES", "EPOCHS", "TARGET", "BEST", "RESTARTS", "HPARAMS"]


def trial_rows(trials: list[dict[str, Any]]) -> list[list[Any]]:
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
             "" if t["best_metric"] is None else num(t["best_metric"]),
             t["restarts"],
             # nested hyperparameters by dotted name (--json keeps them nested)
             " ".join(f"{k}={value(v)}" for k, v in flat_hparams(t["hparams"]).items())]
            for t in trials]


def trial_table(trials: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """:data:`TRIAL_HEADERS` and :func:`trial_rows`, with a BACKEND column before HPARAMS
    where a trial reported the Keras backend that trained it (its latest checkpoint's).

    >>> t = {"id": 1, "state": "COMPLETED", "steps_completed": 20, "epoch": 1,
    ...      "best_metric": None, "restarts": 0, "hparams": {}, "keras_backend": "jax"}
    >>> headers, rows = trial_table([t])
    >>> headers[-2:], rows[0][-2:]
    (['BACKEND', 'HPARAMS'], ['jax', ''])
    >>> trial_table([{**t, "keras_backend": None}])[0] == TRIAL_HEADERS
    True
    """
    rows = trial_rows(trials)
    if not any(t.get("keras_backend") for t in trials):
        return TRIAL_HEADERS, rows
    return ([*TRIAL_HEADERS[:-1], "BACKEND", TRIAL_HEADERS[-1]],
            [[*r[:-1], t.get("keras_backend") or "", r[-1]] for t, r in zip(trials, rows)])


def ranked(client: Any, exp_id: int, checkpoints: list[dict[str, Any]],
            metric: str | None, smaller: bool | None) -> list[dict[str, Any]]:
    """Checkpoints with a validation ``metric`` (default: the searcher's), best first."""
    if metric is None:
        searcher = client.experiment(exp_id)["config"].get("searcher") or {}
        metric = searcher.get("metric", "val_loss")
        smaller = searcher.get("smaller_is_better", True)
    scored = [c for c in checkpoints
              if isinstance((c.get("metrics") or {}).get(metric), (int, float))]
    return sorted(scored, key=lambda c: c["metrics"][metric], reverse=not smaller)


def download(fetch: Any, what: str, directory: str) -> Path:
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


def download_checkpoint(client: Any, uuid: str, output_dir: str | None, quiet: bool) -> Path:
    """A checkpoint where Determined puts it: ``output_dir``, or ``checkpoints/UUID``."""
    dest = download(lambda f: client.download_checkpoint_to(uuid, f), f"checkpoint {uuid}",
                    output_dir if output_dir is not None else str(Path("checkpoints", uuid)))
    print(dest if quiet else f"Local checkpoint path: {dest}")
    return dest


def files_download(args: Namespace, kind: str) -> int:
    """The files a trial or job wrote into its working directory (kept when it ended;
    while they are still being copied the master answers 409: asked again)."""
    client = connect(args)
    dest = download(lambda f: client.download_files_to(kind, args.id, f),
                     f"files of {kind[:-1]} {args.id}", args.dir)
    print(f"{kind[:-1]} {args.id} files -> {dest}")
    return 0


#: Determined's columns of ``det cmd list`` and ``det shell list`` (no user, pool or
#: workspace), with the slots
TASK_COLUMNS = ["ID", "Description", "State", "Exit Status", "Slots"]


#: Determined's ``--sort-by`` choices of ``det cmd/notebook/shell list`` -> det_sdk's field
#: (one resource pool and no workspaces: those two sort nothing, as equal values)
SORT_FIELDS = {"id": "id", "username": "user_id", "description": "description",
               "state": "state", "exitStatus": "exit_status", "resourcePool": None,
               "workspaceName": None, "startTime": "started"}
#: the list verbs' ``--sort-by`` and ``--order-by`` (Determined's defaults)
SORT_OPTIONS: list[tuple[Any, dict[str, Any]]] = [
    ("--sort-by", {"choices": list(SORT_FIELDS), "default": "startTime",
                   "help": "sort by this field (default: startTime)"}),
    ("--order-by", {"choices": ["asc", "desc"], "default": "asc",
                    "help": "ascending or descending order"}),
]


def sort_tasks(args: Namespace, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tasks`` in ``args.sort_by`` order (``--order-by desc``: reversed); a queued task
    (no start time yet) after the started ones, by its creation.

    >>> tasks = [{"id": 2, "started": None, "created": 5}, {"id": 1, "started": 3}]
    >>> [t["id"] for t in sort_tasks(Namespace(sort_by="startTime", order_by="asc"), tasks)]
    [1, 2]
    """
    field = SORT_FIELDS.get(getattr(args, "sort_by", None) or "startTime")
    if field is None:
        return list(tasks)

    def key(t: dict[str, Any]) -> tuple[bool, Any]:
        value = t.get(field)
        if field == "started" and value is None:
            return True, t.get("created") or 0
        return value is None, value if value is not None else 0

    return sorted(tasks, key=key, reverse=getattr(args, "order_by", "asc") == "desc")


def print_tasks(args: Namespace, tasks: list[dict[str, Any]]) -> int:
    """Commands or shells as ``list`` prints them: ``-q`` the ids, ``--json``, or the rows.

    >>> print_tasks(Namespace(quiet=True, json=False, csv=False), [{"id": 3}])
    3
    0
    """
    from det_sdk.cli.render import print_json, print_rows

    tasks = sort_tasks(args, tasks)
    if getattr(args, "quiet", False):  # describe has no -q
        print("\n".join(str(t["id"]) for t in tasks))
    elif args.json:
        print_json(tasks)
    else:
        print_rows(TASK_COLUMNS, [[t["id"], t["description"], t["state"],
                                   t["exit_status"] or "", t["slots"]] for t in tasks], args.csv)
    return 0


def kill_each(client: Any, path: str, ids: list[int], what: str, force: bool) -> int:
    """Kill each of ``ids`` (``POST path/ID/kill``) in turn, as Determined does: a failure
    stops the rest unless ``force`` (then it is skipped, said)."""
    from det_sdk.cli.render import escape
    from det_sdk.errors import DetSdkError

    for i, task_id in enumerate(ids):
        try:
            client.request("POST", f"{path}/{task_id}/kill")
        except DetSdkError as err:  # the master's answer (404: no such id)
            if not force:
                for left in ids[i + 1:]:
                    print(f"Cowardly not killing {left}")
                raise
            print(f"Skipping: {escape(err)} ({type(err).__name__})")
            continue
        print(f"Killed {what} {task_id}")
    return 0


def workspace_by_name(client: Any, name: str) -> dict[str, Any]:
    """The workspace named ``name`` (issue 59), or a UsageError naming it."""
    found = client.request("GET", "/api/v1/workspaces", params={"name": name})["workspaces"]
    if not found:
        raise UsageError(f"workspace_name: no workspace named {name!r}")
    return dict(found[0])


def project_by_name(client: Any, workspace: str, name: str) -> dict[str, Any]:
    """Project ``name`` of workspace ``workspace`` (issue 59), or a UsageError naming it."""
    ws_id = workspace_by_name(client, workspace)["id"]
    found = client.request("GET", f"/api/v1/workspaces/{ws_id}/projects",
                           params={"name": name})["projects"]
    if not found:
        raise UsageError(f"project_name: workspace {workspace!r} has no project named "
                         f"{name!r}")
    return dict(found[0])
