"""``det notebook``: Determined's notebooks, a JupyterLab on one of the master's slots with
the context directory as its working directory, opened through the master's proxy (the
master's side: ``det_sdk.master.notebooks``; the task's: ``det_sdk.launch.jupyter``).

``det notebook start [-c DIR] [--config K=V] [--config-file F] [--no-browser] [-d]``
queues it, waits for JupyterLab and opens it in the browser (``-d``: prints its id and
returns; ``--no-browser``: prints its address only). ``open ID`` opens a running one.
``list``, ``config``, ``logs`` and ``kill`` as ``det cmd``'s.

The browser needs the master's sign-in: a browser signed in to the web UI (``det ui``)
opens it at once; any other is asked to sign in.

>>> from det_sdk.cli.main import build_parser
>>> words = ["notebook", "start", "--no-browser", "--config", "idle_timeout=30m"]
>>> args = build_parser(words).parse_args(words)
>>> args.no_browser, args.config
(True, ['idle_timeout=30m'])
"""

from __future__ import annotations

import argparse
import sys
import time
from argparse import Namespace

from det_sdk.cli import common
from det_sdk.cli.common import refusal, refused
from det_sdk.cli.logs_cmd import LOG_OPTIONS
from det_sdk.cli.render import escape
from det_sdk.errors import DetSdkError

TYPE_CHECKING = False  # typing costs `det --help` time: for the type checker only
if TYPE_CHECKING:
    from typing import Any

    from det_sdk.cli.common import CommandTable

__all__ = ["COMMANDS", "NotebookNotOpen", "notebook_url"]

PATH = "/api/v1/notebooks"
POLL_SECONDS = 0.3
#: seconds a RUNNING notebook has to start JupyterLab (a queued one waits for slots)
READY_SECONDS = 180.0


class NotebookNotOpen(DetSdkError, ConnectionError):
    """The notebook ended (or never started JupyterLab): nothing to open."""


def notebook_url(master: str, notebook: dict[str, Any]) -> str:
    """The address that opens ``notebook`` (as the master shows it) through ``master``.

    >>> notebook_url("http://127.0.0.1:8080/", {"service_address": "/proxy/notebooks/3/lab"})
    'http://127.0.0.1:8080/proxy/notebooks/3/lab'
    """
    base = master if "://" in master else f"http://{master}"
    return base.rstrip("/") + str(notebook["service_address"])


def _notebook(client: Any, nb_id: int) -> dict[str, Any]:
    return client.request("GET", f"{PATH}/{nb_id}")["notebook"]


def _wait_ready(client: Any, nb_id: int) -> dict[str, Any]:
    """The notebook once JupyterLab listens; NotebookNotOpen once it has ended."""
    told = False
    running_since: float | None = None
    while True:
        nb = _notebook(client, nb_id)
        if nb["ready"]:
            return nb
        if nb["state"] in ("TERMINATING", "TERMINATED"):
            raise NotebookNotOpen(f"notebook {nb_id} is {nb['state']} "
                                  f"({nb.get('exit_status') or 'stopping'}): det notebook "
                                  f"logs {nb_id}")
        if nb["state"] == "QUEUED" and not told:
            told = True
            print(f"notebook {nb_id} is queued: waiting for {nb['slots']} free slot(s)",
                  file=sys.stderr, flush=True)
        if nb["state"] == "RUNNING":
            running_since = running_since or time.monotonic()
            if time.monotonic() - running_since > READY_SECONDS:
                raise NotebookNotOpen(f"notebook {nb_id}: JupyterLab did not start in "
                                      f"{READY_SECONDS:.0f} s: det notebook logs {nb_id}")
        time.sleep(POLL_SECONDS)


def _open(args: Namespace, nb_id: int, browser: bool) -> int:
    import webbrowser

    nb = _wait_ready(common.connect(args), nb_id)
    url = notebook_url(args.master, nb)
    if browser:
        webbrowser.open(url)
    print(f"JupyterLab is running at: {url}")
    return 0


def start(args: Namespace) -> int:
    """Queue a notebook; unless ``-d``, wait for JupyterLab and open it."""
    import base64

    config = common.task_config(args, "notebook")
    files = None
    if args.context is not None:
        files = base64.b64encode(common.pack_directory(args.context)).decode()
    client = common.connect(args)
    nb = client.request("POST", PATH, json={"config": config, "files": files})["notebook"]
    if args.detach:
        print(nb["id"])
        return 0
    print(f"Launched notebook (id: {nb['id']}, description: {escape(nb['description'])})",
          file=sys.stderr, flush=True)
    return _open(args, nb["id"], not args.no_browser)


def open_notebook(args: Namespace) -> int:
    """Open a running notebook in the browser."""
    return _open(args, args.notebook_id, True)


def list_notebooks(args: Namespace) -> int:
    """Determined's columns; ``-q`` the ids; ``--all``: every user's (as without it)."""
    return common.print_tasks(args, common.connect(args).request("GET", PATH)["notebooks"])


def config(args: Namespace) -> int:
    """The notebook's config as YAML (as the master validated it)."""
    import yaml

    nb = _notebook(common.connect(args), args.notebook_id)
    sys.stdout.write(yaml.safe_dump(nb["config"], sort_keys=False))
    return 0


def logs(args: Namespace) -> int:
    """What its JupyterLab logged: ``--head``, ``--tail``, ``-f``."""
    from det_sdk.cli.logs_cmd import print_log

    client = common.connect(args)
    nb_id = _notebook(client, args.notebook_id)["id"]

    def state() -> str:
        now = _notebook(client, nb_id)["state"]
        return "COMPLETED" if now == "TERMINATED" else now  # the log's end

    print_log(client, "commands", nb_id, state, args)
    return 0


def kill(args: Namespace) -> int:
    """Kill each in turn (a failure stops the rest unless ``--force``)."""
    return common.kill_each(common.connect(args), PATH, args.notebook_id, "notebook",
                            args.force)


_ID = ("notebook_id", {"type": int, "help": "the notebook's id (det notebook list)"})
_NO_CONTAINER = "det_sdk runs a notebook as processes on the master's slots, with no " \
                "container: put the files in the context directory (-c DIR)"
_LIST = (list_notebooks, "the notebooks (running, queued and ended)", [
    (("-q", "--quiet"), {"action": "store_true", "help": "only the ids"}),
    (("-a", "--all"), {"action": "store_true",
                       "help": "all users' (det_sdk lists every user's: the same)"}),
    ("--json", {"action": "store_true", "help": "machine-readable output"}),
    ("--csv", {"action": "store_true", "help": "comma-separated values"}),
    *common.SORT_OPTIONS,  # Determined's --sort-by, --order-by
])

#: ``det notebook``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: CommandTable = {
    "list": _LIST,
    "config": (config, "a notebook's config (YAML)", [_ID]),
    "start": (start, "start JupyterLab on a slot and open it through the master", [
        ("--config-file", {"help": "a notebook config (.yaml): description, resources.slots, "
                                   "environment, hyperparameters, idle_timeout, "
                                   "notebook_idle_type"}),
        ("--config", {"action": "append", "default": [], "metavar": "KEY=VALUE",
                      "help": "a config value, e.g. idle_timeout=30m (repeatable)"}),
        (("-c", "--context"), {"default": None, "metavar": "DIR",
                               "help": "a directory whose contents are copied into the "
                                       "notebook's working directory (its startup-hook.sh "
                                       "runs first)"}),
        ("--no-browser", {"action": "store_true",
                          "help": "print its address; do not open a browser"}),
        (("-d", "--detach"), {"action": "store_true",
                              "help": "print its id and return"}),
        (("-i", "--include"), refused(_NO_CONTAINER, True)),
        (("-v", "--volume"), refused(_NO_CONTAINER, True)),
        ("--template", refused("det_sdk has no config templates: use --config-file",
                               True)),
        (("-w", "--workspace-name"), refused("det_sdk has no workspaces", True)),
        ("--preview", refused("det_sdk has no config templates to preview: det notebook "
                              "config ID shows a started one's")),
    ]),
    "open": (open_notebook, "open a running notebook in the browser", [_ID]),
    "logs": (logs, "what a notebook's JupyterLab logged", [_ID, *LOG_OPTIONS]),
    "kill": (kill, "stop notebooks: JupyterLab and every kernel (SIGTERM, then SIGKILL)", [
        ("notebook_id", {"type": int, "nargs": "+", "help": "their ids"}),
        (("-f", "--force"), {"action": "store_true", "help": "go on past errors"})]),
    "set": {"priority": (refusal("det notebook set priority: det_sdk's scheduler has no "
                                 "priorities (first come, first served)"),
                         "refused: no priorities",
                         [("rest", {"nargs": "*", "help": argparse.SUPPRESS})])},
}
