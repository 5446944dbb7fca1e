"""``det tensorboard start|list|kill|open|logs``: TensorBoard servers the master runs
(Determined's commands; the master's side is ``det_sdk.master.tensorboards``).

``start`` asks the master for a TensorBoard over experiments' (and ``-t`` trials')
TensorBoard directories, waits until it serves, prints ``TensorBoard is running at: URL``
(as Determined) and opens it in a browser unless ``--no-browser``; ``-d`` prints its id at
once instead. The URL is on the master's host, at the port TensorBoard bound.

>>> from det_sdk.cli.main import build_parser
>>> args = build_parser().parse_args(["tensorboard", "start", "3", "-t", "7", "--no-browser"])
>>> args.experiment_ids, args.trial_ids, args.no_browser, args.func.__name__
([3], [7], True, 'start')
"""

from __future__ import annotations

import sys
import time
from argparse import Namespace
from urllib.parse import urlsplit

from det_sdk.cli import common
from det_sdk.cli.render import escape, print_json, table
from det_sdk.errors import DetSdkError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["kill", "list_tensorboards", "logs", "open_tensorboard", "start"]

START_TIMEOUT = 180.0  # TensorBoard imports TensorFlow when it can: seconds on a busy host
PATH = "/api/v1/tensorboards"


def _url(args: Namespace, tb: dict[str, Any]) -> str:
    """Its URL as this machine reaches the master: the master's host name, its port."""
    host = urlsplit(args.master).hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{tb['port']}/"


def _config(args: Namespace) -> dict[str, Any]:
    """``--config-file`` and ``--config K=V``: Determined's TensorBoard config, of which
    det_sdk's master honours ``description``; any other key is refused by name."""
    config: dict[str, Any] = {}
    if args.config_file:
        from det_sdk.config import load_yaml_file

        loaded = load_yaml_file(args.config_file)
        if not isinstance(loaded, dict):
            raise UsageError(f"--config-file {args.config_file}: expected a mapping")
        config = loaded
    config = common.parse_overrides(config, args.config)
    other = sorted(set(config) - {"description"})
    if other:
        raise UsageError(f"--config/--config-file: {', '.join(other)}: det_sdk's master runs "
                         "TensorBoard beside itself (no image, resources, pool or mounts to "
                         "choose); only `description` is honoured")
    if config.get("description") is not None and not isinstance(config["description"], str):
        raise UsageError("--config description: expected a string")
    return config


def _open(url: str) -> None:
    import webbrowser

    if not webbrowser.open(url):
        print("det: could not open a browser here; open the URL above", file=sys.stderr)


def start(args: Namespace) -> int:
    """Start a TensorBoard on the master; wait until it serves; print (and open) its URL."""
    if not (args.experiment_ids or args.trial_ids):
        raise UsageError("experiment_ids or --trial-ids: give at least one (det tensorboard "
                         "start EXP_ID... [-t TRIAL_ID...])")
    config = _config(args)
    client = common.connect(args)
    tb = client.request("POST", PATH, json={
        "experiment_ids": args.experiment_ids, "trial_ids": args.trial_ids or [],
        "description": config.get("description")})["tensorboard"]
    if args.detach:
        print(tb["id"])
        return 0
    print(f"Scheduling {escape(tb['description'])} (id: {tb['id']})...", flush=True)
    deadline = time.monotonic() + START_TIMEOUT
    while tb["state"] == "STARTING" and time.monotonic() < deadline:
        time.sleep(0.3)
        tb = client.request("GET", f"{PATH}/{tb['id']}")["tensorboard"]
    if tb["state"] != "RUNNING":
        why = tb["exit_status"] or f"not serving after {START_TIMEOUT:.0f} s"
        raise UsageError(f"TensorBoard {tb['id']} did not start: {why}; its output: "
                         f"det tensorboard logs {tb['id']}")
    url = _url(args, tb)
    print(f"TensorBoard is running at: {url}", flush=True)
    if not args.no_browser:
        _open(url)
    return 0


_COLUMNS = ["ID", "Description", "State", "Experiment IDs", "Trial IDs", "Exit Status", "URL"]


def list_tensorboards(args: Namespace) -> int:
    """Determined's columns (no user, pool or workspace: one user, one pool), and the URL;
    ``--all`` shows the same (one user); ``-q`` the ids only."""
    rows = common.connect(args).request("GET", PATH)["tensorboards"]
    for tb in rows:
        tb["url"] = _url(args, tb) if tb["state"] == "RUNNING" else None
    if args.quiet:
        print("\n".join(tb["id"] for tb in rows))
        return 0
    if args.json:
        print_json(rows)
        return 0
    cells = [[tb["id"], tb["description"], tb["state"],
              ",".join(map(str, tb["experiment_ids"])), ",".join(map(str, tb["trial_ids"])),
              tb["exit_status"] or "", tb["url"] or ""] for tb in rows]
    if args.csv:
        import csv

        writer = csv.writer(sys.stdout)
        writer.writerows([_COLUMNS, *cells])
        return 0
    print(escape(table(_COLUMNS, cells), multiline=True))
    return 0


def kill(args: Namespace) -> int:
    """Kill each one in turn (Determined: a failure stops the rest unless ``--force``)."""
    client = common.connect(args)
    for i, tb_id in enumerate(args.tensorboard_id):
        try:
            tb = client.request("POST", f"{PATH}/{tb_id}/kill")["tensorboard"]
        except DetSdkError as err:  # the master's answer (404: no such id)
            if not args.force:
                for left in args.tensorboard_id[i + 1:]:
                    print(f"Cowardly not killing {left}")
                raise
            print(f"Skipping: {escape(err)} ({type(err).__name__})")
            continue
        print(f"Killed tensorboard {tb['id']}")
    return 0


def open_tensorboard(args: Namespace) -> int:
    """Print and open a RUNNING one's URL (Determined refuses one not running)."""
    tb = common.connect(args).request("GET", f"{PATH}/{args.tensorboard_id}")["tensorboard"]
    if tb["state"] != "RUNNING":
        raise UsageError(f"TensorBoard {tb['id']} is {tb['state']}: it must be RUNNING to "
                         "open")
    url = _url(args, tb)
    print(url)
    _open(url)
    return 0


def logs(args: Namespace) -> int:
    """What TensorBoard printed: ``--head N``, ``--tail N``, ``-f`` until it ends."""
    from det_sdk.cli.logs_cmd import print_log

    client = common.connect(args)
    tb_id = client.request("GET", f"{PATH}/{args.tensorboard_id}")["tensorboard"]["id"]

    def state() -> str:
        now = client.request("GET", f"{PATH}/{tb_id}")["tensorboard"]["state"]
        return "COMPLETED" if now == "TERMINATED" else now  # the log's end

    print_log(client, "tensorboards", tb_id, state, args)
    return 0
