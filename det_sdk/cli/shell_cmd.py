"""``det shell``: Determined's shells, an SSH server on one of the master's slots with
the context directory as its working directory (the master's side:
``det_sdk.master.shells``; the task's: ``det_sdk.launch.sshd``).

``det shell start [-c DIR] [--config K=V] [--config-file F] [-d] [-- SSH_ARGS]`` queues
it, waits for its sshd and opens a session (``-d``: prints its id and returns). ``open ID
[-- SSH_ARGS]`` opens another (the words after ``--`` go to ``ssh`` after its
destination, as in Determined: options, or the command to run); ``show_ssh_command ID``
(``show-ssh-command``) prints the ``ssh`` command for an IDE. ``list``, ``config``,
``logs`` and ``kill`` as ``det cmd``'s.

The shell's key is written to ``~/.det/shells/<master>/<id>/key`` (0600, beside the
saved token), and its host key to ``known_hosts`` there: ``ssh`` checks the server is the
shell's (``StrictHostKeyChecking=yes``).

>>> from det_sdk.cli.main import build_parser
>>> words = ["shell", "open", "3", "--", "echo", "hi"]
>>> args = build_parser(words).parse_args(words)
>>> args.shell_id, ssh_words(args.ssh_opts)
(3, ['echo', 'hi'])
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

from det_sdk.cli import common
from det_sdk.cli.common import refusal, refused
from det_sdk.cli.logs_cmd import LOG_OPTIONS
from det_sdk.cli.render import escape
from det_sdk.errors import DetSdkError

TYPE_CHECKING = False  # typing costs `det --help` time: for the type checker only
if TYPE_CHECKING:
    from typing import Any

    from det_sdk.cli.common import CommandTable

__all__ = ["COMMANDS", "key_folder", "ssh_command", "ssh_words"]

PATH = "/api/v1/shells"
POLL_SECONDS = 0.3
#: seconds a RUNNING shell has to start its sshd (a queued one waits for slots unbounded)
READY_SECONDS = 90.0


class ShellNotOpen(DetSdkError, ConnectionError):
    """The shell ended (or never started its sshd): nothing to connect to."""


def ssh_words(words: list[str]) -> list[str]:
    """The words for ``ssh`` as given after the shell (a leading ``--`` dropped).

    >>> ssh_words(["--", "-L8080:localhost:8080"]), ssh_words([])
    (['-L8080:localhost:8080'], [])
    """
    return words[1:] if words[:1] == ["--"] else list(words)


def key_folder(master: str, shell_id: int) -> Path:
    """Where the CLI keeps shell ``shell_id``'s key and host key: beside the saved token.

    >>> key_folder("http://127.0.0.1:8080", 3).parts[-3:]
    ('shells', '127.0.0.1_8080', '3')
    """
    import re
    from urllib.parse import urlsplit

    from det_sdk.env import setting

    creds = setting("DET_CREDENTIALS")
    base = Path(creds).parent if creds else Path.home() / ".det"
    where = urlsplit(master if "://" in master else f"http://{master}")
    name = re.sub(r"[^A-Za-z0-9.-]", "_", where.netloc or master)
    return base / "shells" / name / str(shell_id)


def ssh_command(shell: dict[str, Any], key: Path, known_hosts: Path, master: str,
                extra: list[str]) -> list[str]:
    """The ``ssh`` command that opens ``shell`` (as the master shows it: ``user``,
    ``host``, ``port``) with its key; through the master's host when the master is not
    on this machine (its sshd listens on the master's 127.0.0.1).

    >>> ssh_command({"id": 3, "user": "me", "host": "127.0.0.1", "port": 2222},
    ...             Path("/k/key"), Path("/k/known_hosts"), "http://127.0.0.1:8080", [])[-3:]
    ['-p', '2222', 'me@127.0.0.1']
    """
    from urllib.parse import urlsplit

    words = ["ssh", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
             "-i", str(key), "-o", f"UserKnownHostsFile={known_hosts}",
             "-o", "StrictHostKeyChecking=yes", "-o", f"HostKeyAlias=det-shell-{shell['id']}",
             "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no"]
    host = urlsplit(master if "://" in master else f"http://{master}").hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1", ""):
        words += ["-o", f"ProxyJump={host}"]  # your own account on the master's machine
    return [*words, "-p", str(shell["port"]), f"{shell['user']}@{shell['host']}", *extra]


def _shell(client: Any, shell_id: int) -> dict[str, Any]:
    return client.request("GET", f"{PATH}/{shell_id}")["shell"]


def _wait_ready(client: Any, shell_id: int) -> dict[str, Any]:
    """The shell once its sshd listens; ShellNotOpen once it has ended."""
    told = False
    running_since: float | None = None
    while True:
        shell = _shell(client, shell_id)
        if shell["ready"]:
            return shell
        if shell["state"] in ("TERMINATING", "TERMINATED"):
            raise ShellNotOpen(f"shell {shell_id} is {shell['state']} "
                               f"({shell.get('exit_status') or 'stopping'}): det shell "
                               f"logs {shell_id}")
        if shell["state"] == "QUEUED" and not told:
            told = True
            print(f"shell {shell_id} is queued: waiting for {shell['slots']} free slot(s)",
                  file=sys.stderr, flush=True)
        if shell["state"] == "RUNNING":
            running_since = running_since or time.monotonic()
            if time.monotonic() - running_since > READY_SECONDS:
                raise ShellNotOpen(f"shell {shell_id}: its sshd did not start in "
                                   f"{READY_SECONDS:.0f} s: det shell logs {shell_id}")
        time.sleep(POLL_SECONDS)


def _write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by this account only (0600 from the start)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


def _prepared(args: Namespace, shell_id: int) -> list[str]:
    """The ssh command of a ready shell, its key and host key written for it."""
    client = common.connect(args)
    shell = _wait_ready(client, shell_id)
    key = client.request("GET", f"{PATH}/{shell_id}/key")["private_key"]
    folder = key_folder(args.master, shell_id)
    _write_private(folder / "key", key)
    _write_private(folder / "known_hosts", f"det-shell-{shell_id} {shell['host_key']}\n")
    return ssh_command(shell, folder / "key", folder / "known_hosts", args.master,
                       ssh_words(args.ssh_opts))


def _ssh(args: Namespace, shell_id: int) -> int:
    import shlex

    command = _prepared(args, shell_id)
    if getattr(args, "show_ssh_command", False):
        print(shlex.join(command))
    code = subprocess.run(command).returncode
    if not ssh_words(args.ssh_opts) and sys.stdin.isatty():
        print(f"To reconnect, run: det shell open {shell_id}", file=sys.stderr)
    return code


def start(args: Namespace) -> int:
    """Queue a shell; unless ``-d``, open a session once its sshd listens."""
    import base64

    config = common.task_config(args, "shell")
    files = None
    if args.context is not None:
        files = base64.b64encode(common.pack_directory(args.context)).decode()
    client = common.connect(args)
    shell = client.request("POST", PATH, json={"config": config, "files": files})["shell"]
    if args.detach:
        print(shell["id"])
        return 0
    print(f"Launched shell (id: {shell['id']}, description: "
          f"{escape(shell['description'])})", file=sys.stderr, flush=True)
    return _ssh(args, shell["id"])


def open_shell(args: Namespace) -> int:
    """Another session in a running shell; ssh's exit code."""
    return _ssh(args, args.shell_id)


def show_ssh_command(args: Namespace) -> int:
    """Print the ssh command (its key and host key written for it)."""
    import shlex

    print(shlex.join(_prepared(args, args.shell_id)))
    return 0


def list_shells(args: Namespace) -> int:
    """Determined's columns; ``-q`` the ids; ``--all``: every user's (as without it)."""
    return common.print_tasks(args, common.connect(args).request("GET", PATH)["shells"])


def config(args: Namespace) -> int:
    """The shell's config as YAML (as the master validated it)."""
    import yaml

    shell = _shell(common.connect(args), args.shell_id)
    sys.stdout.write(yaml.safe_dump(shell["config"], sort_keys=False))
    return 0


def logs(args: Namespace) -> int:
    """What its sshd logged (sign-ins, errors): ``--head``, ``--tail``, ``-f``."""
    from det_sdk.cli.logs_cmd import print_log

    client = common.connect(args)
    shell_id = _shell(client, args.shell_id)["id"]

    def state() -> str:
        now = _shell(client, shell_id)["state"]
        return "COMPLETED" if now == "TERMINATED" else now  # the log's end

    print_log(client, "commands", shell_id, state, args)
    return 0


def kill(args: Namespace) -> int:
    """Kill each in turn (a failure stops the rest unless ``--force``)."""
    return common.kill_each(common.connect(args), PATH, args.shell_id, "shell", args.force)


_ID = ("shell_id", {"type": int, "help": "the shell's id (det shell list)"})
_SSH = ("ssh_opts", {"nargs": argparse.REMAINDER, "metavar": "SSH_ARGS",
                     "help": "after --: given to ssh after the destination (options such as "
                             "-L8080:localhost:8080, or a command to run)"})
_SHOW = ("--show-ssh-command", {"action": "store_true",
                                "help": "print the ssh command (e.g. for an IDE) too"})
_NO_CONTAINER = "det_sdk runs a shell as processes on the master's slots, with no " \
                "container: put the files in the context directory (-c DIR)"

#: ``det shell``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: CommandTable = {
    "list": (list_shells, "the shells (running, queued and ended)", [
        (("-q", "--quiet"), {"action": "store_true", "help": "only the ids"}),
        (("-a", "--all"), {"action": "store_true",
                           "help": "all users' (det_sdk lists every user's: the same)"}),
        ("--json", {"action": "store_true", "help": "machine-readable output"}),
        ("--csv", {"action": "store_true", "help": "comma-separated values"}),
        *common.SORT_OPTIONS,  # Determined's --sort-by, --order-by
    ]),
    "config": (config, "a shell's config (YAML)", [_ID]),
    "start": (start, "start a shell (an SSH server on a slot) and open a session in it", [
        _SSH,
        ("--config-file", {"help": "a shell config (.yaml): description, resources.slots, "
                                   "environment, hyperparameters"}),
        ("--config", {"action": "append", "default": [], "metavar": "KEY=VALUE",
                      "help": "a config value, e.g. resources.slots=2 (repeatable)"}),
        (("-c", "--context"), {"default": None, "metavar": "DIR",
                               "help": "a directory whose contents are copied into the "
                                       "shell's working directory (its startup-hook.sh "
                                       "runs first)"}),
        (("-d", "--detach"), {"action": "store_true",
                              "help": "print its id and return; do not open a session"}),
        _SHOW,
        (("-i", "--include"), refused(_NO_CONTAINER, True)),
        (("-v", "--volume"), refused(_NO_CONTAINER, True)),
        ("--template", refused("det_sdk has no config templates: use --config-file",
                               True)),
        (("-w", "--workspace-name"), refused("det_sdk has no workspaces", True)),
    ]),
    "open": (open_shell, "open a session in a running shell", [_ID, _SHOW, _SSH]),
    "show_ssh_command": (show_ssh_command, "print the ssh command (e.g. for an IDE)",
                         [_ID, _SSH]),
    "show-ssh-command": (show_ssh_command, "print the ssh command (e.g. for an IDE)",
                         [_ID, _SSH]),
    "logs": (logs, "what a shell's sshd logged", [_ID, *LOG_OPTIONS]),
    "kill": (kill, "stop shells: their sshd and every session (SIGTERM, then SIGKILL)", [
        ("shell_id", {"type": int, "nargs": "+", "help": "their ids"}),
        (("-f", "--force"), {"action": "store_true", "help": "go on past errors"})]),
    "set": {"priority": (refusal("det shell set priority: det_sdk's scheduler has no "
                                 "priorities (first come, first served)"),
                         "refused: no priorities",
                         [("rest", {"nargs": "*", "help": argparse.SUPPRESS})])},
}
