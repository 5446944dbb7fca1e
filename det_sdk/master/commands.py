"""Commands (Determined's ``det cmd run``): a command line run on the master's slots in a
copy of a context directory, its output kept as a log, followed by the CLI.

A command is a task like a trial or a batch job, and uses their machinery rather than
its own: the scheduler's loop launches it (``Scheduler.task_queues``) through the resource
manager, in the same pass and from the same free slots as jobs and trials; its allocation
carries its task token; its log is ``<tasks>/commands/<id>/logs.txt`` and the files it
wrote into its working directory are kept when it ends (``Scheduler.keep_files``), as a
job's. What is its own is its table (created on first use, like
``det_sdk.master.job_records``'s) and its lifecycle, Determined's:

- ``QUEUED`` until slots are free (``resources.slots``, default 1; 0 takes none, at most
  :data:`MAX_ZERO_SLOT` of those at once), ``RUNNING`` once launched, ``TERMINATING`` once
  asked to stop, ``TERMINATED`` at its end, with its exit code and ``exit_status`` (why).
- A command never restarts: not after a failure, not after a master restart. The master's
  stop (``det master down``) kills the running ones (:meth:`Commands.stop`); a master that
  starts after one that died kills what was left running and ends every command that had
  not ended TERMINATED (:meth:`Commands.recover`): none is left holding a slot.

>>> from det_sdk.master.store import Store
>>> table = CommandTable(Store(":memory:"))
>>> cmd = table.insert({"entrypoint": ["true"], "resources": {"slots": 1}}, "/tmp/a.tgz")
>>> table.get(cmd)["state"]
'QUEUED'
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from det_sdk.master.errors import InvalidRequest, NotFound

__all__ = ["MAX_ZERO_SLOT", "STATES", "CommandTable", "Commands", "decode_files",
           "empty_archive", "exit_status", "read_log_chunk", "whole_characters"]

log = logging.getLogger("det_sdk.master.commands")

TASK_TYPE = "COMMAND"  # the allocation's task_type (Determined's DET_TASK_TYPE)
KIND = "commands"  # the folder of its working directory, log and kept files
QUEUED, RUNNING, TERMINATING, TERMINATED = "QUEUED", "RUNNING", "TERMINATING", "TERMINATED"
STATES = (QUEUED, RUNNING, TERMINATING, TERMINATED)
#: commands of 0 slots running at once (Determined bounds them per agent as well)
MAX_ZERO_SLOT = 16
#: seconds a killed command has between SIGTERM and SIGKILL
KILL_GRACE_SECONDS = 10.0

_TABLES = (
    """CREATE TABLE IF NOT EXISTS commands (
        id INTEGER PRIMARY KEY AUTOINCREMENT, description TEXT NOT NULL,
        config TEXT NOT NULL, state TEXT NOT NULL, archive TEXT NOT NULL,
        allocation TEXT, exit_code INTEGER, exit_status TEXT,
        created REAL NOT NULL, started REAL, ended REAL,
        -- who launched it (issue 59's users; NULL: the first admin)
        owner_id INTEGER,
        -- 'command', or 'shell' (det_sdk.master.shells: a command that runs sshd)
        kind TEXT NOT NULL DEFAULT 'command')""",
    "CREATE INDEX IF NOT EXISTS commands_by_state ON commands(state)",
    # what `context.fit` in the command reports (det_sdk.session.command): one report per
    # (group, step), a repeat replaces; at most MAX_METRIC_ROWS per command
    """CREATE TABLE IF NOT EXISTS command_metrics (
        command_id INTEGER NOT NULL, grp TEXT NOT NULL, steps INTEGER NOT NULL,
        epoch INTEGER NOT NULL, metrics TEXT NOT NULL, time REAL NOT NULL,
        PRIMARY KEY (command_id, grp, steps))""",
)
#: metric reports kept per command (the oldest go first past it)
MAX_METRIC_ROWS = 10_000
_COLUMNS = ("id", "description", "config", "state", "archive", "allocation", "exit_code",
            "exit_status", "created", "started", "ended", "owner_id", "kind")
#: a task's kind -> its type in ``det job list`` (a shell's allocation is a command's,
#: DET_TASK_TYPE=COMMAND: ``det.keras.init()`` in it opens the task's own run, as in a command)
JOB_TYPES = {"command": TASK_TYPE, "shell": "SHELL"}


def exit_status(code: int) -> str:
    """Why a command ended, in words (Determined's ``exitStatus``).

    >>> exit_status(0), exit_status(3), exit_status(-9)
    ('command exited successfully', 'command exited with code 3', 'command killed by signal 9')
    """
    if code == 0:
        return "command exited successfully"
    if code < 0:
        return f"command killed by signal {-code}"
    return f"command exited with code {code}"


class CommandTable:
    """The ``commands`` table in ``store``'s database (a ``det_sdk.master.store.Store``)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        with store.tx() as db:
            for sql in _TABLES:
                db.execute(sql)
            # a table made before shells had no kind column: every row is a command
            cols = {r[1] for r in db.execute("PRAGMA table_info(commands)").fetchall()}
            if "kind" not in cols:
                db.execute("ALTER TABLE commands ADD COLUMN kind TEXT NOT NULL DEFAULT"
                           " 'command'")

    def _rows(self, where: str, *args: Any) -> list[dict[str, Any]]:
        with self.store.tx() as db:
            rows = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM commands {where}",
                              args).fetchall()
        out = [dict(zip(_COLUMNS, r)) for r in rows]
        for r in out:
            r["config"] = json.loads(r["config"])
        return out

    def insert(self, config: dict[str, Any], archive: str, owner_id: int | None = None,
               kind: str = "command") -> int:
        """A new QUEUED command (``kind``: or a shell) of user ``owner_id``; its id."""
        with self.store.tx() as db:
            cur = db.execute(
                "INSERT INTO commands (description, config, state, archive, created, owner_id,"
                " kind) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (config.get("description") or "", json.dumps(config), QUEUED, archive,
                 time.time(), owner_id, kind))
            assert cur.lastrowid is not None  # an INSERT ran on this cursor
            cmd_id = int(cur.lastrowid)
            if not config.get("description"):  # Determined's default: "Command (<words>)"
                words = config["entrypoint"]
                text = words if isinstance(words, str) else " ".join(words)
                db.execute("UPDATE commands SET description = ? WHERE id = ?",
                           (f"Command ({text[:200]})", cmd_id))
        return cmd_id

    def get(self, cmd_id: int) -> dict[str, Any] | None:
        rows = self._rows("WHERE id = ?", cmd_id)
        return rows[0] if rows else None

    def in_states(self, *states: str) -> list[dict[str, Any]]:
        marks = ", ".join("?" * len(states))
        return self._rows(f"WHERE state IN ({marks}) ORDER BY id", *states)

    def all(self, kind: str | None = None) -> list[dict[str, Any]]:
        if kind is None:
            return self._rows("ORDER BY id")
        return self._rows("WHERE kind = ? ORDER BY id", kind)

    def record_metrics(self, cmd_id: int, group: str, steps: int, epoch: int,
                       metrics: str) -> bool:
        """Keep one report (``metrics``: its JSON) of a RUNNING command; False: it is not
        running."""
        with self.store.tx() as db:
            if db.execute("SELECT 1 FROM commands WHERE id = ? AND state = ?",
                          (cmd_id, RUNNING)).fetchone() is None:
                return False
            db.execute("INSERT OR REPLACE INTO command_metrics VALUES (?, ?, ?, ?, ?, ?)",
                       (cmd_id, group, steps, epoch, metrics, time.time()))
            (n,) = db.execute("SELECT COUNT(*) FROM command_metrics WHERE command_id = ?",
                              (cmd_id,)).fetchone()
            if n > MAX_METRIC_ROWS:
                db.execute("DELETE FROM command_metrics WHERE rowid IN (SELECT rowid FROM"
                           " command_metrics WHERE command_id = ? ORDER BY time LIMIT ?)",
                           (cmd_id, n - MAX_METRIC_ROWS))
        return True

    def latest_metrics(self, cmd_id: int) -> dict[str, dict[str, Any]]:
        """Each group's report of the highest step: ``{group: {steps_completed, epoch,
        metrics}}``."""
        from det_sdk.api import decode_metric

        with self.store.tx() as db:
            rows = db.execute(
                "SELECT grp, steps, epoch, metrics FROM command_metrics m WHERE command_id = ?"
                " AND steps = (SELECT MAX(steps) FROM command_metrics WHERE command_id ="
                " m.command_id AND grp = m.grp) ORDER BY grp", (cmd_id,)).fetchall()
        return {g: {"steps_completed": st, "epoch": e,
                    "metrics": {k: decode_metric(v) for k, v in json.loads(m).items()}}
                for g, st, e, m in rows}

    def update(self, cmd_id: int, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.store.tx() as db:
            db.execute(f"UPDATE commands SET {cols} WHERE id = ?", (*fields.values(), cmd_id))


class Commands:
    """The master's commands: created by the routes, launched by the scheduler's loop,
    ended by their exits, a kill, the master's stop or its restart.

    ``scheduler`` is the master's ``Scheduler`` (its launcher, lock, paths and disk work);
    ``store_archive(kind, data)`` stores an upload and returns its path;
    ``disk_work(what, fn, *args)`` runs slow file work off the lock.
    """

    def __init__(self, store: Any, scheduler: Any, store_archive: Callable[[str, bytes], Path],
                 disk_work: Callable[..., None]) -> None:
        self.table = CommandTable(store)
        self.store = store
        self.scheduler = scheduler
        self.launcher = scheduler.launcher
        self.lock: threading.RLock = scheduler.lifecycle.lock
        self._store_archive = store_archive
        self._disk_work = disk_work
        # the scheduler launches them in its pass and tells of their exits
        scheduler.task_queues.append(self.launch_queued)
        scheduler.exit_handlers[TASK_TYPE] = self.on_exit
        #: called with each command's row once it has ended (det_sdk.master.shells: its keys)
        self.end_hooks: list[Callable[[dict[str, Any]], None]] = []

    # --- what the routes ask --------------------------------------------------------------

    def create(self, config: dict[str, Any], archive: bytes,
               owner_id: int | None = None, kind: str = "command") -> dict[str, Any]:
        """Queue a command (``config`` validated: a ``CommandConfig`` dumped as JSON) of
        user ``owner_id`` (``kind``: or a shell, ``det_sdk.master.shells``)."""
        slots = config["resources"]["slots"]
        if self.launcher.kind == "slurm" and slots != 1:
            raise InvalidRequest(f"resources.slots: {slots}: under Slurm a command takes 1 "
                                 "slot (Slurm would start it once per task, and a job has "
                                 "at least one)")
        if slots > self.launcher.slots:
            raise InvalidRequest(f"resources.slots: {slots} is more than this master has "
                                 f"({self.launcher.slots}{self.launcher.capacity_note()})")
        path = self._store_archive(KIND, archive)
        try:
            cmd_id = self.table.insert(config, str(path), owner_id, kind)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        self.scheduler.wakeup.set()
        return self.get(cmd_id)

    def get(self, cmd_id: int) -> dict[str, Any]:
        """The command as the API shows it (NotFound if there is none), with each metric
        group's latest report (``latest_metrics``: what ``context.fit`` in it reported)."""
        row = self.table.get(cmd_id)
        if row is None:
            raise NotFound(f"no command {cmd_id}")
        return {**_shown(row), "latest_metrics": self.table.latest_metrics(cmd_id)}

    def every(self, kind: str = "command") -> list[dict[str, Any]]:
        """Every command (``kind``: or every shell), oldest first."""
        return [_shown(r) for r in self.table.all(kind)]

    def allocation_of(self, cmd_id: int) -> str | None:
        """The allocation the command runs (ran) as; None before it was launched."""
        row = self.table.get(cmd_id)
        if row is None:
            raise NotFound(f"no command {cmd_id}")
        return row["allocation"]

    def report_metrics(self, cmd_id: int, group: str, steps: int, epoch: int,
                       metrics: dict[str, float]) -> None:
        """What ``context.fit`` in the command reports, kept while it runs."""
        from det_sdk.api import encode_metric
        from det_sdk.master.errors import Conflict

        row = self.table.get(cmd_id)
        if row is None:
            raise NotFound(f"no command {cmd_id}")
        body = json.dumps({k: encode_metric(float(v)) for k, v in metrics.items()})
        if not self.table.record_metrics(cmd_id, group, steps, epoch, body):
            raise Conflict(f"command {cmd_id} is {row['state']}: its metrics are no longer "
                           "recorded")

    def logs_path(self, cmd_id: int) -> Path:
        return Path(self.scheduler.logs_path(KIND, cmd_id))

    def kill(self, cmd_id: int) -> dict[str, Any]:
        """A queued command ends at once; a running one is stopped (SIGTERM to its
        processes, SIGKILL after the grace) and ends TERMINATED once they are gone."""
        with self.lock:
            row = self.table.get(cmd_id)
            if row is None:
                raise NotFound(f"no command {cmd_id}")
            if row["state"] == QUEUED:
                self._end(row, None, "killed before it started")
            elif row["state"] == RUNNING:
                self.table.update(cmd_id, state=TERMINATING)
                alloc = self.store.allocation(row["allocation"])
                if alloc is not None and alloc["state"] == "RUNNING":
                    self.launcher.kill(alloc, grace=KILL_GRACE_SECONDS)
        return self.get(cmd_id)

    def queue_rows(self) -> list[dict[str, Any]]:
        """The commands waiting for or holding slots, as ``det job list`` rows."""
        return [{"type": JOB_TYPES.get(r["kind"], TASK_TYPE), "id": r["id"],
                 "name": r["description"],
                 "submitted": r["created"],
                 "acquired": 0 if r["state"] == QUEUED else r["config"]["resources"]["slots"],
                 "needed": r["config"]["resources"]["slots"],
                 "state": QUEUED if r["state"] == QUEUED else "SCHEDULED"}
                for r in self.table.in_states(QUEUED, RUNNING, TERMINATING)]

    # --- the scheduler's side ------------------------------------------------------------

    def launch_queued(self) -> None:
        """Launch queued commands, oldest first, while slots are free (called by the
        scheduler under its lock). The first that does not fit waits, and so do the
        ones behind it: first come, first served, as trials."""
        zero_running = sum(1 for r in self.table.in_states(RUNNING, TERMINATING)
                           if r["config"]["resources"]["slots"] == 0)
        for row in self.table.in_states(QUEUED):
            slots = row["config"]["resources"]["slots"]
            if slots == 0:
                if zero_running >= MAX_ZERO_SLOT:
                    continue
                zero_running += 1
            elif slots > self.launcher.free_slots():
                return
            self._launch(row)

    def _launch(self, row: dict[str, Any]) -> None:
        from det_sdk.config.command import parse_command_config
        from det_sdk.master.resources import task_env

        cmd_id = row["id"]
        config = row["config"]
        cfg = parse_command_config(config)
        # the command's id is in its allocation's (command-<id>-<hex>)
        env = task_env({"DET_EXPERIMENT_CONFIG": config, "DET_HPARAMS": cfg.hyperparameters})
        try:
            alloc_id = self.launcher.launch(
                task_type=TASK_TYPE, task_id=cmd_id, archive=row["archive"],
                workdir=self.scheduler.workdir(KIND, cmd_id), entrypoint=cfg.command_line(),
                slots=cfg.resources.slots, env=env, log_path=self.logs_path(cmd_id),
                per_node=True)  # once, with every slot of its own (not a rank per slot)
        except Exception as err:
            log.warning("command %s could not be launched: %s", cmd_id, err)
            _append(self.logs_path(cmd_id), f"launch failed: {type(err).__name__}: {err}\n")
            self._end(row, None, f"launch failed: {err}")
            return
        alloc = self.store.allocation(alloc_id)
        # its times are its allocation's: when it took its slots and when it gave them back
        self.table.update(cmd_id, state=RUNNING, allocation=alloc_id,
                          started=alloc["started"] if alloc else time.time())

    def on_exit(self, alloc: dict[str, Any], code: int) -> None:
        """Its processes ended with ``code`` (the resource manager's callback)."""
        with self.lock:
            row = next((r for r in self.table.in_states(RUNNING, TERMINATING)
                        if r["allocation"] == alloc["id"]), None)
            if row is None:
                return  # ended already (the master's restart ended it)
            status = exit_status(code)
            if row["state"] == TERMINATING:  # killed (or the master's restart ended it)
                status = row["exit_status"] or f"killed ({status})"
            ended = (self.store.allocation(alloc["id"]) or {}).get("ended")
            self._end(row, code, status, ended)

    def _end(self, row: dict[str, Any], code: int | None, status: str,
             ended: float | None = None) -> None:
        self.table.update(row["id"], state=TERMINATED, exit_code=code, exit_status=status,
                          ended=ended or time.time())
        log.info("command %s: TERMINATED (%s)", row["id"], status)
        for hook in self.end_hooks:
            hook(row)
        self._disk_work(f"keep command {row['id']}'s files", self._ended_files, row)
        self.scheduler.wakeup.set()

    def _ended_files(self, row: dict[str, Any]) -> None:
        """Its working directory goes, what it wrote there kept; its upload goes."""
        if self.scheduler.workdir(KIND, row["id"]).exists():
            self.scheduler.keep_files(KIND, row["id"])
        Path(row["archive"]).unlink(missing_ok=True)

    # --- the master's start and stop ------------------------------------------------------

    def stop(self) -> None:
        """The master is going (``det master down``): every command ends. Queued ones at
        once, running ones killed (the resource manager's stop, which the master waits
        for within the grace, ends them TERMINATED)."""
        with self.lock:
            for row in self.table.in_states(QUEUED):
                self._end(row, None, "the master stopped before it started")
            for row in self.table.in_states(RUNNING, TERMINATING):
                self.table.update(row["id"], state=TERMINATING)
                alloc = self.store.allocation(row["allocation"]) if row["allocation"] else None
                if alloc is not None and alloc["state"] == "RUNNING":
                    self.launcher.kill(alloc, grace=KILL_GRACE_SECONDS)

    def recover(self) -> None:
        """After a master that did not stop cleanly: what it left running is killed and
        every command that had not ended is TERMINATED (Determined's commands do not
        outlive their master either); their slots come free as their processes go."""
        with self.lock:
            for row in self.table.in_states(QUEUED, RUNNING, TERMINATING):
                _append(self.logs_path(row["id"]), "det_sdk: the master restarted: this "
                        "command ends (commands do not outlive their master)\n")
                alloc = self.store.allocation(row["allocation"]) if row["allocation"] else None
                if alloc is not None and alloc["state"] == "RUNNING":
                    # TERMINATED once its processes are gone (on_exit), which the kill sees to
                    self.table.update(row["id"], state=TERMINATING,
                                      exit_status="the master restarted")
                    self.launcher.kill(alloc, grace=1.0)
                else:
                    self._end(row, None, "the master restarted")
            # a master that went while an ended command's files were kept: kept again
            for row in self.table.in_states(TERMINATED):
                if self.scheduler.workdir(KIND, row["id"]).exists():
                    self._disk_work(f"keep command {row['id']}'s files", self._ended_files,
                                    row)


def decode_files(files_b64: str | None) -> bytes:
    """The context directory's archive from its base64 (none: an empty directory's),
    checked as an experiment's upload is (InvalidRequest)."""
    from det_sdk.master.archive import decode_archive

    if not files_b64:
        return empty_archive()
    return decode_archive(files_b64, "files")


def whole_characters(data: bytes) -> bytes:
    """``data`` without the start of a UTF-8 character cut off at its end (a log read
    1 MiB at a time would turn it into U+FFFD; the next read starts with it whole).

    >>> whole_characters("aé".encode()[:-1]), whole_characters("aé".encode())
    (b'a', b'a\\xc3\\xa9')
    """
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:  # ASCII: nothing is cut
            return data
        if byte >= 0xC0:  # the lead byte of the last character: is it whole?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


def read_log_chunk(path: Path, offset: int, size: int = 1 << 20) -> dict[str, Any]:
    """A command's log from byte ``offset``: at most ``size`` bytes, ended at a whole
    character, and the offset after them (``det_sdk.master.routes.common.read_log``'s
    answer, for output in any language).

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "log"
    >>> _ = f.write_bytes("héllo".encode())
    >>> read_log_chunk(f, 0, size=2), read_log_chunk(f, 1, size=3)
    ({'text': 'h', 'offset': 1}, {'text': 'él', 'offset': 4})
    """
    import os

    try:
        with open(path, "rb") as f:
            offset = min(offset, os.fstat(f.fileno()).st_size)
            f.seek(offset)
            data = f.read(size)
    except (FileNotFoundError, NotADirectoryError):
        data = b""
    if len(data) == size:
        data = whole_characters(data) or data  # a "character" longer than size: as it is
    return {"text": data.decode("utf-8", errors="replace"), "offset": offset + len(data)}


def empty_archive() -> bytes:
    """The .tar.gz of an empty directory (a command run without ``-c DIR``).

    >>> import tarfile, io
    >>> tarfile.open(fileobj=io.BytesIO(empty_archive())).getnames()
    []
    """
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz"):
        pass
    return buf.getvalue()


def _append(path: Path, text: str) -> None:
    """Add a line of det_sdk's to a command's log (the reason is in the master's log
    when it cannot be written)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(text)
    except OSError as err:
        log.warning("cannot write %s: %s", path, err)


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """A command as the API answers it: its id, description, state, exit and config."""
    return {"id": row["id"], "description": row["description"], "state": row["state"],
            "config": row["config"], "exit_code": row["exit_code"],
            "exit_status": row["exit_status"], "created": row["created"],
            "started": row["started"], "ended": row["ended"],
            "slots": row["config"]["resources"]["slots"], "user_id": row.get("owner_id"),
            "kind": row.get("kind") or "command"}
