"""Shells (Determined's ``det shell start``): an SSH server on the master's slots, for
the shell's owner only, reached with a key pair made for it.

A shell is a command (``det_sdk.master.commands``, ``kind = 'shell'``): the same queue,
slots, log, kill, master's stop and crash recovery. Its entrypoint is
``python3 -m det_sdk.launch.sshd``, which runs OpenSSH's ``sshd`` in the foreground as the
master's account with a host key and config of its own, on a free port of 127.0.0.1, and
tells the master (with its task token) the port and its host key. What is a shell's own
is its keys (the ``shells`` table): an ed25519 pair made here when it is created, whose
public half its sshd accepts and whose private half the API gives its owner (or an
admin) only; and the host key the master tells the CLI, so that ``ssh`` checks it
(``StrictHostKeyChecking=yes``) where Determined's CLI turns the check off.

>>> from det_sdk.master.store import Store
>>> table = ShellTable(Store(":memory:"))
>>> table.insert(1, "PRIVATE", "ssh-ed25519 AAAA det-shell-1")
>>> table.get(1)["public_key"], table.get(1)["port"]
('ssh-ed25519 AAAA det-shell-1', None)
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound, RequestError

__all__ = ["ENTRYPOINT", "NotTheShells", "ShellTable", "Shells", "check_host_key",
           "new_key_pair"]

log = logging.getLogger("det_sdk.master.shells")

KIND = "shell"
#: what a shell's task runs (``python3`` is det_sdk's interpreter in a task)
ENTRYPOINT = ["python3", "-m", "det_sdk.launch.sshd"]
_TABLE = """CREATE TABLE IF NOT EXISTS shells (
    command_id INTEGER PRIMARY KEY, private_key TEXT, public_key TEXT NOT NULL,
    -- what the task reports once its sshd listens
    host_key TEXT, host TEXT, port INTEGER, user TEXT)"""
_COLUMNS = ("command_id", "private_key", "public_key", "host_key", "host", "port", "user")
_HOST_KEY = re.compile(r"^ssh-ed25519 [A-Za-z0-9+/=]{20,200}$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def check_host_key(key: str) -> str:
    """``key`` if it is one OpenSSH ed25519 public key (type and base64, its comment
    dropped); InvalidRequest naming it otherwise.

    >>> check_host_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample host")
    'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample'
    >>> check_host_key("ssh-rsa x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    det_sdk.master.errors.InvalidRequest: host_key: expected an OpenSSH ed25519 public key ...
    """
    words = key.split()
    short = " ".join(words[:2])
    if not _HOST_KEY.match(short):
        raise InvalidRequest("host_key: expected an OpenSSH ed25519 public key "
                             "(ssh-ed25519 BASE64)")
    return short


def new_key_pair(comment: str) -> tuple[str, str]:
    """A new ed25519 key pair made by OpenSSH's ``ssh-keygen``: (private key in OpenSSH's
    format, public key line). Never logged.

    >>> private, public = new_key_pair("det-shell-doc")  # doctest: +SKIP
    >>> private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----"), public.split()[0]
    ... # doctest: +SKIP
    (True, 'ssh-ed25519')
    """
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise InvalidRequest("det shell needs OpenSSH's ssh-keygen on the master's machine "
                             "(Debian: apt-get install openssh-client openssh-server)")
    with tempfile.TemporaryDirectory(prefix="det-shell-key-") as tmp:
        path = Path(tmp) / "key"
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                        str(path)], check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
        return path.read_text(), path.with_suffix(".pub").read_text().strip()


class NotTheShells(RequestError):
    """A caller who is not the shell's (its owner, an admin, its own task): 403."""

    default_status = 403


class ShellTable:
    """The ``shells`` table in ``store``'s database: each shell's keys and address."""

    def __init__(self, store: Any) -> None:
        self.store = store
        with store.tx() as db:
            db.execute(_TABLE)

    def insert(self, cmd_id: int, private_key: str, public_key: str) -> None:
        with self.store.tx() as db:
            db.execute("INSERT INTO shells (command_id, private_key, public_key) VALUES"
                       " (?, ?, ?)", (cmd_id, private_key, public_key))

    def get(self, cmd_id: int) -> dict[str, Any] | None:
        with self.store.tx() as db:
            row = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM shells WHERE command_id = ?",
                             (cmd_id,)).fetchone()
        return dict(zip(_COLUMNS, row)) if row else None

    def update(self, cmd_id: int, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.store.tx() as db:
            db.execute(f"UPDATE shells SET {cols} WHERE command_id = ?",
                       (*fields.values(), cmd_id))


class Shells:
    """The master's shells, over its commands (``Master.commands``)."""

    def __init__(self, store: Any, commands: Any) -> None:
        self.table = ShellTable(store)
        self.commands = commands
        commands.end_hooks.append(self._ended)

    def create(self, config: dict[str, Any], archive: bytes,
               owner_id: int | None = None) -> dict[str, Any]:
        """Queue a shell: ``config`` is Determined's shell config (no ``entrypoint``:
        a shell's is its SSH server); its key pair is made here."""
        from det_sdk.config import ConfigError
        from det_sdk.config.command import parse_command_config

        if self.commands.launcher.kind == "slurm":
            raise InvalidRequest("det shell: not under the Slurm resource manager (its sshd "
                                 "would listen on a compute node's 127.0.0.1, which the "
                                 "CLI cannot reach): use det cmd run, or a local master")
        if not isinstance(config, dict):
            raise InvalidRequest("config: expected a mapping")
        if "entrypoint" in config:
            raise InvalidRequest("entrypoint: a shell's entrypoint is its SSH server; run a "
                                 "command with det cmd run, or in the shell")
        private, public = new_key_pair("det-shell")
        try:  # the public key is the entrypoint's (it is no secret)
            parsed = parse_command_config({
                **config, "entrypoint": [*ENTRYPOINT, "--public-key", public],
                "description": config.get("description") or "Shell"}).model_dump(mode="json")
        except (ConfigError, RecursionError) as err:
            raise InvalidRequest(str(err)) from None
        shell = self.commands.create(parsed, archive, owner_id, kind=KIND)
        self.table.insert(shell["id"], private, public)
        return self.get(shell["id"])

    def _row(self, shell_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
        cmd = self.commands.get(shell_id)  # NotFound
        keys = self.table.get(shell_id)
        if cmd.get("kind") != KIND or keys is None:
            raise NotFound(f"no shell {shell_id} (command {shell_id} is not a shell)")
        return cmd, keys

    def get(self, shell_id: int) -> dict[str, Any]:
        """The shell as the API shows it: its command's fields, and once its sshd listens
        (``ready``) its host, port, user and host key. Never its private key."""
        cmd, keys = self._row(shell_id)
        ready = cmd["state"] == "RUNNING" and keys["port"] is not None
        return {**cmd, "ready": ready, "host": keys["host"], "port": keys["port"],
                "user": keys["user"], "host_key": keys["host_key"],
                "public_key": keys["public_key"]}

    def every(self) -> list[dict[str, Any]]:
        return [self.get(c["id"]) for c in self.commands.every(KIND)]

    def private_key(self, shell_id: int) -> str:
        """The key its sshd accepts (the route gives it to its owner or an admin only);
        Conflict once the shell has ended (its key is forgotten then)."""
        cmd, keys = self._row(shell_id)
        if keys["private_key"] is None:
            raise Conflict(f"shell {shell_id} is {cmd['state']}: its key is gone")
        return str(keys["private_key"])

    def ready(self, shell_id: int, allocation_id: str, port: int, host_key: str,
              user: str) -> None:
        """The shell's task: its sshd listens on ``port`` of 127.0.0.1 as ``user``."""
        cmd, _ = self._row(shell_id)
        if self.commands.allocation_of(shell_id) != allocation_id:
            raise NotTheShells("this task's token cannot report for another shell")
        if cmd["state"] != "RUNNING":
            raise Conflict(f"shell {shell_id} is {cmd['state']}")
        if not _USER.match(user):
            raise InvalidRequest("user: expected a user name")
        self.table.update(shell_id, port=port, host="127.0.0.1", user=user,
                          host_key=check_host_key(host_key))
        log.info("shell %s: sshd listens on 127.0.0.1:%s", shell_id, port)

    def _ended(self, row: dict[str, Any]) -> None:
        """An ended shell's key opens nothing: it is forgotten, and so is its port."""
        if row.get("kind") == KIND:
            self.table.update(row["id"], private_key=None, port=None)
