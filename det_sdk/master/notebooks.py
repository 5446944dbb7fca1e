"""Notebooks (Determined's ``det notebook start``): a JupyterLab on the master's slots,
reached only through the master's proxy (``det_sdk.master.routes.notebook_proxy``).

A notebook is a command (``det_sdk.master.commands``, ``kind = 'notebook'``): the same
queue, slots, log, kill, master's stop and crash recovery. Its entrypoint is
``python3 -m det_sdk.launch.jupyter``, which starts JupyterLab on a free port of
127.0.0.1 with the proxy's path as its ``base_url`` and a token of its own that only the
master learns (the task reports it with its task token): the user never sees it, the
proxy adds it to every request it forwards, and nobody reaches JupyterLab without going
through the master's sign-in. What is a notebook's own is the ``notebooks`` table (its
port, that token, its idle settings) and the idle watcher.

The idle watcher (Determined's ``idle_timeout`` and ``notebook_idle_type``): every
:data:`IDLE_POLL_SECONDS` the master asks each running notebook with an ``idle_timeout``
for its kernels, terminals and sessions (JupyterLab's ``/api/...``) and kills the one
idle for longer than its timeout, which frees its slot. Idle means, as Determined's
``check_idle.py`` defines it:

- ``kernels_or_terminals`` (the default): no kernel, terminal or session at all;
- ``kernel_connections``: no kernel with a connection (a browser tab open on it);
- ``activity``: no kernel busy, and no kernel or terminal active since the last look.

>>> parse_duration("1h30m"), parse_duration("10s"), parse_duration(45)
(5400.0, 10.0, 45.0)
>>> is_idle("kernels_or_terminals", [], [], [], None)
(True, None)
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound, RequestError

__all__ = ["ENTRYPOINT", "IDLE_TYPES", "NotTheNotebooks", "NotebookTable", "Notebooks", "is_idle",
           "parse_duration", "proxy_prefix"]

log = logging.getLogger("det_sdk.master.notebooks")

KIND = "notebook"
#: what a notebook's task runs (``python3`` is det_sdk's interpreter in a task)
ENTRYPOINT = ["python3", "-m", "det_sdk.launch.jupyter"]
IDLE_TYPES = ("kernels_or_terminals", "kernel_connections", "activity")
#: seconds between two looks of the idle watcher
IDLE_POLL_SECONDS = 1.0
#: seconds one look at a notebook's JupyterLab may take
IDLE_REQUEST_SECONDS = 5.0
#: the longest idle_timeout taken (a year: anything longer is a mistake in the unit)
MAX_IDLE_SECONDS = 365 * 86400.0
_TABLE = """CREATE TABLE IF NOT EXISTS notebooks (
    command_id INTEGER PRIMARY KEY, idle_timeout REAL, idle_type TEXT NOT NULL,
    -- what the task reports once JupyterLab listens (the token: the proxy's, never shown)
    port INTEGER, token TEXT)"""
_COLUMNS = ("command_id", "idle_timeout", "idle_type", "port", "token")
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def proxy_prefix(notebook_id: int) -> str:
    """The path under which the master serves notebook ``notebook_id`` (JupyterLab's
    ``base_url``).

    >>> proxy_prefix(3)
    '/proxy/notebooks/3/'
    """
    return f"/proxy/notebooks/{int(notebook_id)}/"


def parse_duration(value: Any) -> float:
    """``idle_timeout`` in seconds: Determined's duration (Go's: ``"30m"``, ``"1h30m"``,
    ``"90s"``) or a number of seconds; InvalidRequest naming the field otherwise.

    >>> parse_duration("2m")
    120.0
    >>> parse_duration("soon")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    det_sdk.master.errors.InvalidRequest: idle_timeout: 'soon': expected a duration such ...
    """
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and _DURATION.match(value.strip()):
        seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(value.strip()))
    else:
        raise InvalidRequest(f"idle_timeout: {str(value)[:40]!r}: expected a duration such "
                             "as 30m, 1h or 90s")
    if not 0 < seconds <= MAX_IDLE_SECONDS:
        raise InvalidRequest(f"idle_timeout: {str(value)[:40]!r}: expected more than 0 s and "
                             "at most 365 days")
    return seconds


def is_idle(idle_type: str, kernels: list[dict[str, Any]], terminals: list[dict[str, Any]],
            sessions: list[dict[str, Any]], last_activity: str | None
            ) -> tuple[bool, str | None]:
    """Whether a JupyterLab whose API lists ``kernels``, ``terminals`` and ``sessions``
    is idle under ``idle_type``, and the latest activity seen (``activity`` compares it
    with the previous look's, ``last_activity``).

    >>> is_idle("kernels_or_terminals", [{"connections": 0}], [], [], None)[0]
    False
    >>> is_idle("kernel_connections", [{"connections": 0}], [], [], None)[0]
    True
    >>> k = [{"execution_state": "idle", "last_activity": "t1"}]
    >>> is_idle("activity", k, [], [], None), is_idle("activity", k, [], [], "t1")
    ((False, 't1'), (True, 't1'))
    """
    if idle_type == "kernel_connections":
        return all(int(k.get("connections") or 0) == 0 for k in kernels), last_activity
    if idle_type == "activity":
        stamps = [str(x.get("last_activity") or "") for x in kernels + terminals]
        latest = max(stamps) if stamps else last_activity
        busy = any(k.get("execution_state") == "busy" for k in kernels)
        return (not busy and latest == last_activity), latest
    return not (kernels or terminals or sessions), last_activity


class NotTheNotebooks(RequestError):
    """A task token that is not the notebook's own: 403."""

    default_status = 403


class NotebookTable:
    """The ``notebooks`` table in ``store``'s database."""

    def __init__(self, store: Any) -> None:
        self.store = store
        with store.tx() as db:
            db.execute(_TABLE)

    def insert(self, cmd_id: int, idle_timeout: float | None, idle_type: str) -> None:
        with self.store.tx() as db:
            db.execute("INSERT INTO notebooks (command_id, idle_timeout, idle_type) VALUES"
                       " (?, ?, ?)", (cmd_id, idle_timeout, idle_type))

    def get(self, cmd_id: int) -> dict[str, Any] | None:
        with self.store.tx() as db:
            row = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM notebooks WHERE "
                             "command_id = ?", (cmd_id,)).fetchone()
        return dict(zip(_COLUMNS, row)) if row else None

    def update(self, cmd_id: int, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.store.tx() as db:
            db.execute(f"UPDATE notebooks SET {cols} WHERE command_id = ?",
                       (*fields.values(), cmd_id))


class Notebooks:
    """The master's notebooks, over its commands (``Master.commands``)."""

    def __init__(self, store: Any, commands: Any) -> None:
        self.table = NotebookTable(store)
        self.commands = commands
        commands.end_hooks.append(self._ended)
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        #: notebook id -> (monotonic time it was first seen idle, last activity seen)
        self._idle: dict[int, tuple[float | None, str | None]] = {}

    def create(self, config: dict[str, Any], archive: bytes,
               owner_id: int | None = None) -> dict[str, Any]:
        """Queue a notebook: ``config`` is Determined's notebook config (no
        ``entrypoint``: a notebook's is its JupyterLab), ``idle_timeout`` and
        ``notebook_idle_type`` among it."""
        from det_sdk.config import ConfigError
        from det_sdk.config.command import parse_command_config

        if self.commands.launcher.kind == "slurm":
            raise InvalidRequest("det notebook: not under the Slurm resource manager (its "
                                 "JupyterLab would listen on a compute node's 127.0.0.1, "
                                 "which the master's proxy cannot reach): use a local master")
        if not isinstance(config, dict):
            raise InvalidRequest("config: expected a mapping")
        if "entrypoint" in config:
            raise InvalidRequest("entrypoint: a notebook's entrypoint is its JupyterLab; run "
                                 "a command with det cmd run, or in the notebook")
        rest = dict(config)
        raw_timeout = rest.pop("idle_timeout", None)
        idle_timeout = None if raw_timeout is None else parse_duration(raw_timeout)
        idle_type = rest.pop("notebook_idle_type", None) or IDLE_TYPES[0]
        if idle_type not in IDLE_TYPES:
            raise InvalidRequest(f"notebook_idle_type: {str(idle_type)[:40]!r}: expected one "
                                 f"of {', '.join(IDLE_TYPES)}")
        try:
            parsed = parse_command_config({
                **rest, "entrypoint": list(ENTRYPOINT),
                "description": rest.get("description") or "JupyterLab"}
            ).model_dump(mode="json")
        except (ConfigError, RecursionError) as err:
            raise InvalidRequest(str(err)) from None
        nb = self.commands.create(parsed, archive, owner_id, kind=KIND)
        self.table.insert(nb["id"], idle_timeout, idle_type)
        return self.get(nb["id"])

    def _row(self, nb_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
        cmd = self.commands.get(nb_id)  # NotFound
        own = self.table.get(nb_id)
        if cmd.get("kind") != KIND or own is None:
            raise NotFound(f"no notebook {nb_id} (command {nb_id} is not a notebook)")
        return cmd, own

    def get(self, nb_id: int) -> dict[str, Any]:
        """The notebook as the API shows it: its command's fields, its idle settings in
        its config, and once JupyterLab listens (``ready``) the path that opens it. Never
        its token or port."""
        cmd, own = self._row(nb_id)
        ready = cmd["state"] == "RUNNING" and own["port"] is not None
        config = {**cmd["config"], "notebook_idle_type": own["idle_type"],
                  "idle_timeout": own["idle_timeout"]}
        config.pop("entrypoint", None)
        return {**cmd, "config": config, "ready": ready,
                "service_address": f"{proxy_prefix(nb_id)}lab" if ready else None}

    def every(self) -> list[dict[str, Any]]:
        return [self.get(c["id"]) for c in self.commands.every(KIND)]

    def upstream(self, nb_id: int) -> tuple[int, str]:
        """Where the proxy forwards to: (port, token) of a running, ready notebook;
        Conflict otherwise (ended, or not yet listening)."""
        cmd, own = self._row(nb_id)
        if cmd["state"] != "RUNNING" or own["port"] is None or own["token"] is None:
            raise Conflict(f"notebook {nb_id} is {cmd['state']}"
                           + ("" if cmd["state"] != "RUNNING" else " (JupyterLab is starting)"))
        return int(own["port"]), str(own["token"])

    def ready(self, nb_id: int, allocation_id: str, port: int, token: str) -> None:
        """The notebook's task: its JupyterLab listens on ``port`` of 127.0.0.1."""
        cmd, _ = self._row(nb_id)
        if self.commands.allocation_of(nb_id) != allocation_id:
            raise NotTheNotebooks("this task's token cannot report for another notebook")
        if cmd["state"] != "RUNNING":
            raise Conflict(f"notebook {nb_id} is {cmd['state']}")
        self.table.update(nb_id, port=port, token=token)
        log.info("notebook %s: JupyterLab listens on 127.0.0.1:%s", nb_id, port)

    def _ended(self, row: dict[str, Any]) -> None:
        """An ended notebook's port and token open nothing: they are forgotten."""
        if row.get("kind") == KIND:
            self.table.update(row["id"], port=None, token=None)
            self._idle.pop(row["id"], None)

    # --- the idle watcher ----------------------------------------------------------------

    def start(self) -> None:
        """Start the idle watcher (a daemon thread; :meth:`stop` ends it)."""
        self._watcher = threading.Thread(target=self._watch, daemon=True,
                                         name="det-notebook-idle")
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(IDLE_REQUEST_SECONDS * 3 + 1)

    def _watch(self) -> None:
        import httpx

        with httpx.Client(timeout=IDLE_REQUEST_SECONDS) as http:
            while not self._stop.wait(IDLE_POLL_SECONDS):
                try:
                    self.check_idle(http)
                except Exception:  # one bad look must not end the watcher
                    log.exception("the notebooks' idle watcher")

    def check_idle(self, http: Any) -> list[int]:
        """One look at every running notebook with an idle_timeout; the ones killed."""
        killed = []
        for row in self.commands.table.in_states("RUNNING"):
            if row.get("kind") != KIND:
                continue
            own = self.table.get(row["id"])
            if own is None or own["idle_timeout"] is None or own["port"] is None:
                continue
            if self._look(http, row["id"], own):
                killed.append(row["id"])
        return killed

    def _look(self, http: Any, nb_id: int, own: dict[str, Any]) -> bool:
        base = f"http://127.0.0.1:{own['port']}{proxy_prefix(nb_id)}api"
        headers = {"Authorization": f"token {own['token']}"}
        try:
            kernels, terminals, sessions = (
                http.get(f"{base}/{what}", headers=headers).raise_for_status().json()
                for what in ("kernels", "terminals", "sessions"))
        except Exception as err:  # not answering is not idle (Determined's rule too)
            log.debug("notebook %s: no answer from JupyterLab: %s", nb_id, err)
            return False
        since, last = self._idle.get(nb_id, (None, None))
        idle, last = is_idle(own["idle_type"], list(kernels), list(terminals),
                             list(sessions), last)
        now = time.monotonic()
        if not idle:
            self._idle[nb_id] = (None, last)
            return False
        since = since if since is not None else now
        self._idle[nb_id] = (since, last)
        if now - since < own["idle_timeout"]:
            return False
        log.info("notebook %s: idle (%s) for %.0f s: killed (idle_timeout)", nb_id,
                 own["idle_type"], now - since)
        self.commands.table.update(nb_id, exit_status=(
            f"killed: idle ({own['idle_type']}) for more than its idle_timeout of "
            f"{own['idle_timeout']:g} s"))
        self.commands.kill(nb_id)
        self._idle.pop(nb_id, None)
        return True
