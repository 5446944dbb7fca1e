"""The master's SQLite file (WAL): its schema, the columns added since, the indexes, the
JSON a column keeps, and :class:`Database`, the connection and transactions that each
table family's methods (det_sdk.master.store's modules) run on.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from det_sdk.api import decode_metric, encode_metric
from det_sdk.master.rows import (
    AllocationRow,
)
from det_sdk.wire import replace_non_finite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT, config TEXT NOT NULL, state TEXT NOT NULL, archive TEXT NOT NULL,
    created REAL NOT NULL, ended REAL
);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    hparams TEXT NOT NULL, seed INTEGER NOT NULL, state TEXT NOT NULL,
    restarts INTEGER NOT NULL DEFAULT 0, steps_completed INTEGER NOT NULL DEFAULT 0,
    epoch INTEGER NOT NULL DEFAULT 0, progress REAL NOT NULL DEFAULT 0,
    latest_checkpoint TEXT, best_metric REAL, last_error TEXT,
    created REAL NOT NULL, ended REAL,
    bracket INTEGER NOT NULL DEFAULT 0, target INTEGER, searcher_done INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS rungs (
    trial_id INTEGER NOT NULL REFERENCES trials(id), rung INTEGER NOT NULL,
    metric REAL NOT NULL, promoted INTEGER NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (trial_id, rung)
);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT, config TEXT NOT NULL, state TEXT NOT NULL, archive TEXT NOT NULL,
    exit_code INTEGER, created REAL NOT NULL, ended REAL
);
CREATE TABLE IF NOT EXISTS allocations (
    id TEXT PRIMARY KEY, task_type TEXT NOT NULL, trial_id INTEGER, job_id INTEGER,
    token TEXT NOT NULL UNIQUE, state TEXT NOT NULL, pid INTEGER, slots INTEGER NOT NULL,
    workdir TEXT, preempt INTEGER NOT NULL DEFAULT 0, exit_code INTEGER,
    started REAL NOT NULL, ended REAL
);
CREATE TABLE IF NOT EXISTS metrics (
    trial_id INTEGER NOT NULL, grp TEXT NOT NULL, steps INTEGER NOT NULL,
    epoch INTEGER NOT NULL, metrics TEXT NOT NULL, time REAL NOT NULL,
    PRIMARY KEY (trial_id, grp, steps)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    uuid TEXT PRIMARY KEY, trial_id INTEGER NOT NULL, steps INTEGER NOT NULL,
    epoch INTEGER NOT NULL, batch INTEGER NOT NULL, size INTEGER NOT NULL,
    metrics TEXT NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS user_tokens (token TEXT PRIMARY KEY, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS system_metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT, trial_id INTEGER NOT NULL, grp TEXT NOT NULL,
    time REAL NOT NULL, steps INTEGER, data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ui_sessions (
    id TEXT PRIMARY KEY, token TEXT NOT NULL, created REAL NOT NULL, last_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS users (
    id INTEGER PRIMARY KEY AUTOINCREMENT, username TEXT NOT NULL UNIQUE,
    admin INTEGER NOT NULL DEFAULT 0, active INTEGER NOT NULL DEFAULT 1, password TEXT,
    display_name TEXT, created REAL NOT NULL
);
"""

# Columns added after a table was first released: added to older databases on open.
_ADDED_COLUMNS = {
    "trials": ("bracket INTEGER NOT NULL DEFAULT 0", "target INTEGER",
               "searcher_done INTEGER NOT NULL DEFAULT 0",
               # what became of its damaged checkpoints (det_sdk.master.checkpoints)
               "checkpoint_note TEXT",
               # the Keras backend of its latest checkpoint (det_sdk.master.checkpoints)
               "keras_backend TEXT"),
    # det_sdk.master.resources: the resource manager's id of the task (a Slurm job id),
    # why it waits in that manager's queue, and when a kill turns into a forced stop
    "allocations": ("rm_id TEXT", "queue_reason TEXT", "kill_after REAL",
                    # the task said it stops because it was asked to (a pause), not because
                    # its training ended: its exit with 0 is a stop (Determined's ack)
                    "preempt_acked INTEGER NOT NULL DEFAULT 0"),
    # det_sdk.stages: the stage of the script that saved it (NULL: the default stage), and
    # whether that stage is the searched one (NULL: yes, as before stages)
    "checkpoints": ("stage TEXT", "searched INTEGER",
                    # why it failed verification on restore; NULL: intact as far as known
                    "damaged TEXT",
                    # the Keras backend that trained it, as the trial reported; NULL: none
                    "keras_backend TEXT"),
    # jobs that resume (issue 40): relaunches after a failure; activate once stopped (an
    # activate while it still stops); the chief's latest progress report (rows, where its
    # output goes, when) and the first report of the current allocation (the rate's base)
    # det experiment archive (det_sdk.master.experiment_admin): left out of lists
    "experiments": ("archived INTEGER NOT NULL DEFAULT 0",
                    # det_sdk.master.store.users: who created it (NULL: the first admin)
                    "owner_id INTEGER"),
    "jobs": ("restarts INTEGER NOT NULL DEFAULT 0", "reactivate INTEGER NOT NULL DEFAULT 0",
             "rows_done INTEGER", "rows_total INTEGER", "output TEXT", "progress_at REAL",
             "rate_alloc TEXT", "rate_rows INTEGER", "rate_at REAL",
             # who created it (NULL: the first admin, det_sdk.master.store.users)
             "owner_id INTEGER"),
    # the user a token signs in (NULL: the master's own token, the first admin's)
    "user_tokens": ("user_id INTEGER",
                    # minted for a web UI sign-in by password: it ends with its sessions
                    "ui INTEGER NOT NULL DEFAULT 0"),
}
_JSON_COLUMNS = ("config", "hparams", "metrics")

# Indexes the paged views (det_sdk.master.pages) and the per-trial lookups read through:
# without them each experiment's trials and each trial's checkpoints were a full table
# scan. Created after the column migration, so an existing database gets them on open.
# trials_summary covers the per-experiment counts by state, mean progress and best
# metric of a list page (read from the index alone: a third of the time of the rows).
# experiments(state) and jobs(state) also make COUNT(*) read a small index, not the
# rows with their configs.
_INDEXES = """
CREATE INDEX IF NOT EXISTS trials_by_experiment ON trials(experiment_id);
CREATE INDEX IF NOT EXISTS trials_summary ON trials(experiment_id, state, progress,
                                                    best_metric);
CREATE INDEX IF NOT EXISTS allocations_by_state ON allocations(state);
CREATE INDEX IF NOT EXISTS checkpoints_by_trial ON checkpoints(trial_id);
CREATE INDEX IF NOT EXISTS experiments_by_state ON experiments(state);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state);
CREATE INDEX IF NOT EXISTS system_metrics_by_trial ON system_metrics(trial_id, grp, id);
"""


def row(r: sqlite3.Row | None) -> dict[str, Any] | None:
    """A row as a dict, its JSON columns decoded (None: no row)."""
    if r is None:
        return None
    d = dict(r)
    for k in _JSON_COLUMNS:
        if k in d and isinstance(d[k], str):
            d[k] = json.loads(d[k], object_hook=_untag) if k != "metrics" else json.loads(d[k])
    if isinstance(d.get("metrics"), dict):
        d["metrics"] = {k: decode_metric(v) for k, v in d["metrics"].items()}
    return d


# A config's or hyperparameters' non-finite float (YAML ``.nan``, ``.inf``) is stored
# tagged, ``{"$float": "NaN"}``: the column stays standard JSON (SQLite's json_extract
# refuses a bare NaN) and the value stays a float, where the wire strings "NaN" could
# not be told from a hyperparameter that is the string "NaN". Older rows written with
# bare NaN literals still read (Python's json takes them).
_FLOAT_TAG = "$float"


def _tag(obj: Any) -> Any:
    """``obj`` with non-finite floats tagged (see ``_FLOAT_TAG``).

    >>> _tag({"a": [float("nan"), 1.5], "b": float("-inf")})
    {'a': [{'$float': 'NaN'}, 1.5], 'b': {'$float': '-Infinity'}}
    """
    return replace_non_finite(obj, lambda v: {_FLOAT_TAG: encode_metric(v)})


def _untag(d: dict[str, Any]) -> Any:
    if len(d) == 1 and isinstance(d.get(_FLOAT_TAG), str):
        return decode_metric(d[_FLOAT_TAG])
    return d


def config_json(obj: Any) -> str:
    """A config or hyperparameters as the column keeps them: standard JSON, tagged floats.

    >>> json.loads(config_json({"lr": float("inf")}), object_hook=_untag)
    {'lr': inf}
    """
    return json.dumps(_tag(obj), allow_nan=False)


def metrics_json(metrics: Mapping[str, float]) -> str:
    """Metrics as standard JSON: NaN and infinities as strings (SQLite's JSON functions,
    and any other reader, refuse the bare ``NaN`` that Python would write)."""
    return json.dumps({k: encode_metric(float(v)) for k, v in metrics.items()})


def hash_token(token: str) -> str:
    """What the database keeps of a user token: its SHA-256, so that reading the
    database file does not hand out a token that works.

    >>> hash_token("abc")[:15]
    'sha256:ba7816bf'
    """
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()

class Database:
    """The connection every table family's methods share (det_sdk.master.store), with its
    lock and transactions; opening it creates or migrates the schema."""

    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._user_tokens: set[str] = set()
        self._token_allocations: dict[str, AllocationRow] = {}
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
            for table, columns in _ADDED_COLUMNS.items():
                have = {r["name"] for r in self._db.execute(f"PRAGMA table_info({table})")}
                for col in columns:
                    if col.split()[0] not in have:
                        self._db.execute(f"ALTER TABLE {table} ADD COLUMN {col}")
            self._db.executescript(_INDEXES)

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction: all or nothing."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # Any: each public reader below says which row type (det_sdk.master.rows) it returns
    def _one(self, sql: str, *args: Any) -> Any:
        with self._lock:
            return row(self._db.execute(sql, args).fetchone())

    def _all(self, sql: str, *args: Any) -> Any:
        with self._lock:
            return [row(r) for r in self._db.execute(sql, args).fetchall()]

    def _exec(self, sql: str, *args: Any) -> None:
        with self.tx() as db:
            db.execute(sql, args)

    def _exec_count(self, sql: str, *args: Any) -> int:
        """Run one statement; how many rows it changed."""
        with self.tx() as db:
            return int(db.execute(sql, args).rowcount)

def before(key: int | None) -> int:
    """The exclusive upper bound of a newest-first page: past the largest rowid if None."""
    return 2**63 - 1 if key is None else key


def inserted(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just made (sqlite3 types ``lastrowid`` as optional)."""
    assert cur.lastrowid is not None  # an INSERT was executed on this cursor
    return int(cur.lastrowid)
