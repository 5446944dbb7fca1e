"""``det cmd`` (``det command``): Determined's commands, a command line run on one of the
master's slots in a copy of a context directory (the master's side:
``det_sdk.master.commands``).

``det cmd run [--config K=V] [--config-file F] [-c DIR] [-d] [--] COMMAND...`` queues
it, then follows its output until it ends and exits with its exit code (``-d``: prints
its id and returns). ``list``, ``describe``, ``config``, ``logs [-f] [--head N] [--tail
N]`` and ``kill`` take its id. Logs are read and printed a piece at a time (1 MiB at
most), so a command that prints gigabytes is followed in bounded memory.

>>> from det_sdk.cli.main import build_parser
>>> words = ["cmd", "run", "-d", "--config", "resources.slots=0", "--", "echo", "hi"]
>>> args = build_parser(words).parse_args(words)
>>> args.detach, args.config, entrypoint(args.entrypoint)
(True, ['resources.slots=0'], ['echo', 'hi'])
"""

from __future__ import annotations

import argparse
import sys
import time
from argparse import Namespace

from det_sdk.cli import common
from det_sdk.cli.common import refusal, refused
from det_sdk.cli.logs_cmd import LOG_OPTIONS
from det_sdk.cli.render import escape, print_json
from det_sdk.errors import UsageError

TYPE_CHECKING = False  # typing costs `det --help` 4 ms: for the type checker only
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from det_sdk.cli.common import CommandTable

__all__ = ["COMMANDS", "entrypoint", "exit_code_of"]

PATH = "/api/v1/commands"
ENDED = "TERMINATED"
POLL_SECONDS = 0.3  # between reads of a log that has nothing new


def entrypoint(words: list[str]) -> list[str]:
    """The command's words as given after ``run`` (a leading ``--`` dropped).

    >>> entrypoint(["--", "ls", "-l"]), entrypoint(["ls"])
    (['ls', '-l'], ['ls'])
    """
    return words[1:] if words[:1] == ["--"] else list(words)


def exit_code_of(cmd: dict[str, Any]) -> int:
    """What ``det cmd run`` exits with: the command's exit code; 128 + N for one killed
    by signal N (as a shell); 1 for one that never ran (killed while queued, the master
    restarted).

    >>> [exit_code_of({"exit_code": c}) for c in (0, 3, -9, None)]
    [0, 3, 137, 1]
    """
    code = cmd.get("exit_code")
    if code is None:
        return 1
    return 128 - code if code < 0 else min(int(code), 255)


def _config(args: Namespace) -> dict[str, Any]:
    """``--config-file``, ``--config`` over it, then the command's words (Determined's
    order: a config's own ``entrypoint`` wins), checked before anything is sent."""
    from det_sdk.config.command import parse_command_config

    config = common.task_config(args, "command")
    words = entrypoint(args.entrypoint)
    if not config.get("entrypoint"):
        if not words:
            raise UsageError("det cmd run: give the command to run, e.g. det cmd run -- "
                             "python3 train.py (or entrypoint: in --config-file)")
        config["entrypoint"] = words
    parse_command_config(config)
    return config


def run(args: Namespace) -> int:
    """Queue the command; unless ``-d``, follow its output to its end and exit with its
    exit code."""
    import base64

    config = _config(args)
    files = None
    if args.context is not None:
        files = base64.b64encode(common.pack_directory(args.context)).decode()
    client = common.connect(args)
    cmd = client.request("POST", PATH, json={"config": config, "files": files})["command"]
    if args.detach:
        print(cmd["id"])
        return 0
    print(f"Launched command (id: {cmd['id']}, description: {escape(cmd['description'])})",
          file=sys.stderr, flush=True)
    try:
        final = _follow(client, cmd["id"], 0, sys.stdout.buffer)
    except KeyboardInterrupt:
        print(f"\ndet: stopped following; command {cmd['id']} goes on (det cmd logs -f "
              f"{cmd['id']}; det cmd kill {cmd['id']})", file=sys.stderr)
        return 130
    print(f"command {cmd['id']}: {final['exit_status']}", file=sys.stderr)
    return exit_code_of(final)


def _state(client: Any, cmd_id: int) -> dict[str, Any]:
    return client.request("GET", f"{PATH}/{cmd_id}")["command"]


def _chunks(client: Any, cmd_id: int, offset: int, follow: bool,
            on_wait: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """The log's pieces from byte ``offset`` as they come (each at most 1 MiB), until its
    end now, or (``follow``) until the command has ended and all it wrote is read. The
    last thing yielded is the command: ``("end", cmd, offset)``; before it,
    ``("text", text, offset)`` (``offset``: where the log goes on after it)."""
    while True:
        cmd = _state(client, cmd_id) if follow else None
        got = False
        while True:  # read on at full speed while there is text (a command that prints
            # 100 MB is followed at the speed of the link, not of the poll)
            chunk = client.logs("commands", cmd_id, offset)
            if not chunk["text"]:
                break
            got = True
            offset = chunk["offset"]
            yield "text", chunk["text"], offset
        if not follow or (cmd is not None and cmd["state"] == ENDED):
            yield "end", cmd, offset
            return
        if not got:
            if on_wait is not None and cmd is not None:
                on_wait(cmd)
            time.sleep(POLL_SECONDS)


def _follow(client: Any, cmd_id: int, offset: int, out: Any) -> dict[str, Any]:
    """Write the command's output to ``out`` until it ends; its final state."""
    told = [False]
    since = time.monotonic()

    def waiting(cmd: dict[str, Any]) -> None:
        # said once it has waited a while (not for the moment before the scheduler's pass)
        if cmd["state"] == "QUEUED" and not told[0] and time.monotonic() - since > 3:
            told[0] = True
            print(f"command {cmd_id} is queued: waiting for {cmd['slots']} free slot(s)",
                  file=sys.stderr, flush=True)

    final: dict[str, Any] = {}
    for kind, value, _ in _chunks(client, cmd_id, offset, True, waiting):
        if kind == "text":
            out.write(value.encode("utf-8", errors="surrogateescape"))
            out.flush()
        else:
            final = value
    return final


def logs(args: Namespace) -> int:
    """``det cmd logs ID [-f] [--head N] [--tail N]``: in bounded memory (``--tail``
    keeps N lines, never the whole log)."""
    import collections

    if args.head is not None and args.tail is not None:
        raise UsageError("--head and --tail: give one of them (as in Determined)")
    client = common.connect(args)
    _state(client, args.command_id)  # 404 for an unknown id, before anything is printed
    out = sys.stdout.buffer

    def write(text: str) -> None:
        out.write(text.encode("utf-8", errors="surrogateescape"))
        out.flush()

    if args.head is not None:
        left, partial = args.head, ""
        for kind, text, _ in _chunks(client, args.command_id, 0, args.follow):
            if kind != "text" or left <= 0:
                break
            lines = (partial + text).splitlines(keepends=True)
            partial = "" if lines[-1].endswith(("\n", "\r")) else lines.pop()
            write("".join(lines[:left]))
            left -= min(left, len(lines))
        if left > 0 and partial:
            write(partial)
        return 0
    if args.tail is not None:
        kept: collections.deque[str] = collections.deque(maxlen=max(args.tail, 1))
        partial, offset = "", 0
        for kind, text, end in _chunks(client, args.command_id, 0, False):
            offset = end
            if kind != "text":
                break
            lines = (partial + text).splitlines(keepends=True)
            partial = "" if lines[-1].endswith(("\n", "\r")) else lines.pop()
            kept.extend(lines)
        if partial:
            kept.append(partial)
        if args.tail > 0:
            write("".join(kept))
        if not args.follow:
            return 0
        # what came after: from where the tail ended (the master's offsets are bytes)
        for kind, text, _ in _chunks(client, args.command_id, offset, True):
            if kind == "text":
                write(text)
        return 0
    for kind, text, _ in _chunks(client, args.command_id, 0, args.follow):
        if kind == "text":
            write(text)
    return 0


def list_commands(args: Namespace) -> int:
    """Determined's columns (no user, pool or workspace: one user, one pool), and the
    slots; ``--all`` shows the same (one user); ``-q`` the ids only."""
    return common.print_tasks(args, common.connect(args).request("GET", PATH)["commands"])


def describe(args: Namespace) -> int:
    """Its row; then what ``context.fit`` in it reported: each group's latest metrics."""
    cmd = _state(common.connect(args), args.command_id)
    if args.json:
        print_json(cmd)
        return 0
    common.print_tasks(args, [cmd])
    if not args.csv:
        for group, m in (cmd.get("latest_metrics") or {}).items():
            values = ", ".join(f"{escape(k)}={common.num(v)}" for k, v in m["metrics"].items())
            print(f"{escape(group)} (step {m['steps_completed']}): {values}")
    return 0


def download(args: Namespace) -> int:
    """det_sdk's: the files the command wrote (its fit's det-runs/ among them)."""
    args.id = args.command_id
    return common.files_download(args, "commands")


def config(args: Namespace) -> int:
    """The command's config as YAML (as the master validated it: defaults filled in)."""
    import yaml

    cmd = _state(common.connect(args), args.command_id)
    sys.stdout.write(yaml.safe_dump(cmd["config"], sort_keys=False))
    return 0


def kill(args: Namespace) -> int:
    """Kill each in turn (Determined: a failure stops the rest unless ``--force``)."""
    return common.kill_each(common.connect(args), PATH, args.command_id, "command",
                            args.force)


_ID = ("command_id", {"type": int, "help": "the command's id (det cmd list)"})
_NO_CONTAINER = "det_sdk runs a command as processes on the master's slots, with no " \
                "container: put the files in the context directory (-c DIR)"

#: ``det cmd``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: CommandTable = {
    "run": (run, "run a command on a slot; follow its output; exit with its exit code", [
        ("entrypoint", {"nargs": argparse.REMAINDER, "metavar": "COMMAND",
                        "help": "the command and its arguments (after --, or the first "
                                "word that is not an option)"}),
        ("--config-file", {"help": "a command config (.yaml): entrypoint, description, "
                                   "resources.slots, environment, hyperparameters"}),
        ("--config", {"action": "append", "default": [], "metavar": "KEY=VALUE",
                      "help": "a config value, e.g. resources.slots=2 (repeatable)"}),
        (("-c", "--context"), {"default": None, "metavar": "DIR",
                               "help": "a directory whose contents are copied into the "
                                       "command's working directory (its startup-hook.sh "
                                       "runs first)"}),
        (("-d", "--detach"), {"action": "store_true",
                              "help": "print its id and return; do not follow it"}),
        (("-i", "--include"), refused(_NO_CONTAINER, True)),
        (("-v", "--volume"), refused(_NO_CONTAINER, True)),
        ("--template", refused("det_sdk has no config templates: use --config-file",
                               True)),
        (("-w", "--workspace-name"), refused("det_sdk has no workspaces", True)),
        ("--json", refused("det cmd run prints what the command prints; its record as "
                           "JSON: det cmd describe ID --json")),
    ]),
    "list": (list_commands, "the commands (running, queued and ended)", [
        (("-q", "--quiet"), {"action": "store_true", "help": "only the ids"}),
        (("-a", "--all"), {"action": "store_true",
                           "help": "all users' (det_sdk's master has one user: the same)"}),
        ("--json", {"action": "store_true", "help": "machine-readable output"}),
        ("--csv", {"action": "store_true", "help": "comma-separated values"}),
        *common.SORT_OPTIONS,  # Determined's --sort-by, --order-by
    ]),
    "describe": (describe, "a command's state and exit", [
        _ID, ("--json", {"action": "store_true", "help": "machine-readable output"}),
        ("--csv", {"action": "store_true", "help": "comma-separated values"})]),
    "config": (config, "a command's config (YAML)", [_ID]),
    "download": (download, "det_sdk's: copy the files an ended command wrote into its "
                 "working directory (its fit's det-runs/) into DIR", [_ID, common.FILES_DIR]),
    "logs": (logs, "what a command printed", [_ID, *LOG_OPTIONS]),
    "kill": (kill, "stop commands (SIGTERM, then SIGKILL after 10 s)", [
        ("command_id", {"type": int, "nargs": "+", "help": "their ids"}),
        (("-f", "--force"), {"action": "store_true", "help": "go on past errors"})]),
    "set": {"priority": (refusal("det cmd set priority: det_sdk's scheduler has no "
                                 "priorities (first come, first served)"),
                         "refused: no priorities",
                         [("rest", {"nargs": "*", "help": argparse.SUPPRESS})])},
}
