"""The master's state: one SQLite file (WAL), safe to use from the server's threads.

Everything the master knows survives a restart: experiments, trials and their
processes, metrics (one value per trial, group and step), checkpoints, jobs, tokens.

>>> s = Store(":memory:")
>>> exp = s.create_experiment_with_trials({"name": "x"}, "/tmp/a.tgz", [])
>>> s.experiment(exp)["state"]
'ACTIVE'
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from det_sdk.api import decode_metric, encode_metric
from det_sdk.master.rows import (
    AllocationRow,
    CheckpointListRow,
    CheckpointRow,
    ExperimentRow,
    ExperimentSummaryRow,
    JobRow,
    JobSummaryRow,
    MetricsRow,
    TrialRow,
)
from det_sdk.wire import is_rankable, replace_non_finite

__all__ = ["Store", "hash_token"]

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
CREATE TABLE IF NOT EXISTS ui_sessions (
    id TEXT PRIMARY KEY, token TEXT NOT NULL, created REAL NOT NULL, last_seen REAL NOT NULL
);
"""

# Columns added after a table was first released: added to older databases on open.
_ADDED_COLUMNS = {
    "trials": ("bracket INTEGER NOT NULL DEFAULT 0", "target INTEGER",
               "searcher_done INTEGER NOT NULL DEFAULT 0",
               # what became of its damaged checkpoints (det_sdk.master.checkpoints)
               "checkpoint_note TEXT"),
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
                    "damaged TEXT"),
    # jobs that resume (issue 40): relaunches after a failure; activate once stopped (an
    # activate while it still stops); the chief's latest progress report (rows, where its
    # output goes, when) and the first report of the current allocation (the rate's base)
    # det experiment archive (det_sdk.master.experiment_admin): left out of lists
    "experiments": ("archived INTEGER NOT NULL DEFAULT 0",),
    "jobs": ("restarts INTEGER NOT NULL DEFAULT 0", "reactivate INTEGER NOT NULL DEFAULT 0",
             "rows_done INTEGER", "rows_total INTEGER", "output TEXT", "progress_at REAL",
             "rate_alloc TEXT", "rate_rows INTEGER", "rate_at REAL"),
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
"""


def _row(r: sqlite3.Row | None) -> dict[str, Any] | None:
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


def _config_json(obj: Any) -> str:
    """A config or hyperparameters as the column keeps them: standard JSON, tagged floats.

    >>> json.loads(_config_json({"lr": float("inf")}), object_hook=_untag)
    {'lr': inf}
    """
    return json.dumps(_tag(obj), allow_nan=False)


def _metrics_json(metrics: Mapping[str, float]) -> str:
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


class Store:
    """Thin, typed access to the master's SQLite database."""

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
            return _row(self._db.execute(sql, args).fetchone())

    def _all(self, sql: str, *args: Any) -> Any:
        with self._lock:
            return [_row(r) for r in self._db.execute(sql, args).fetchall()]

    def _exec(self, sql: str, *args: Any) -> None:
        with self.tx() as db:
            db.execute(sql, args)

    def _exec_count(self, sql: str, *args: Any) -> int:
        """Run one statement; how many rows it changed."""
        with self.tx() as db:
            return int(db.execute(sql, args).rowcount)

    # --- tokens -----------------------------------------------------------------------

    def add_user_token(self, token: str) -> None:
        hashed = hash_token(token)
        with self.tx() as db:
            # tokens stored in clear by earlier versions go: the token file re-adds its own
            db.execute("DELETE FROM user_tokens WHERE token NOT LIKE 'sha256:%'")
            db.execute("INSERT OR IGNORE INTO user_tokens VALUES (?, ?)", (hashed, time.time()))
        self._user_tokens.add(hashed)

    def is_user_token(self, token: str) -> bool:
        return self.is_user_token_hash(hash_token(token))

    def is_user_token_hash(self, hashed: str) -> bool:
        """Whether ``hashed`` (``hash_token`` of a token) is a user token's."""
        if hashed in self._user_tokens:
            return True
        if self._one("SELECT 1 AS ok FROM user_tokens WHERE token = ?", hashed) is not None:
            self._user_tokens.add(hashed)
            return True
        return False

    def allocation_by_token(self, token: str) -> AllocationRow | None:
        """The allocation a task token belongs to, with its state (cached until it changes)."""
        alloc = self._token_allocations.get(token)
        if alloc is None:
            alloc = self._one("SELECT * FROM allocations WHERE token = ?", token)
            if alloc is not None:
                self._token_allocations[token] = alloc
        return alloc

    # --- web UI sessions (det_sdk.master.security.Sessions): ids and tokens hashed ------

    def create_ui_session(self, key: str, token_hash: str, now: float) -> None:
        self._exec("INSERT INTO ui_sessions VALUES (?, ?, ?, ?)", key, token_hash, now, now)

    def ui_session(self, key: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM ui_sessions WHERE id = ?", key)

    def touch_ui_session(self, key: str, now: float) -> None:
        self._exec("UPDATE ui_sessions SET last_seen = ? WHERE id = ?", now, key)

    def delete_ui_session(self, key: str) -> None:
        self._exec("DELETE FROM ui_sessions WHERE id = ?", key)

    def prune_ui_sessions(self, idle_before: float, created_before: float) -> None:
        """Forget sessions unused since ``idle_before`` or opened before ``created_before``."""
        self._exec("DELETE FROM ui_sessions WHERE last_seen < ? OR created < ?",
                    idle_before, created_before)

    # --- experiments and trials --------------------------------------------------------

    def experiment(self, exp_id: int) -> ExperimentRow | None:
        return self._one("SELECT * FROM experiments WHERE id = ?", exp_id)

    def experiments(self) -> list[ExperimentRow]:
        return self._all("SELECT * FROM experiments ORDER BY id")

    def experiment_ids_not_in(self, states: Sequence[str]) -> list[int]:
        """Ids of the experiments whose state is none of ``states``, oldest first."""
        marks = ",".join("?" * len(states))
        return [r["id"] for r in self._all(
            f"SELECT id FROM experiments WHERE state NOT IN ({marks}) ORDER BY id", *states)]

    def set_experiment_state(self, exp_id: int, state: str) -> None:
        ended = time.time() if state in ("COMPLETED", "CANCELED", "ERROR") else None
        self._exec("UPDATE experiments SET state = ?, ended = ? WHERE id = ?", state, ended,
                   exp_id)

    def set_experiment_config(self, exp_id: int, config: dict[str, Any]) -> None:
        """Its active config (``det e continue``), with the name it carries."""
        self._exec("UPDATE experiments SET name = ?, config = ? WHERE id = ?",
                   config.get("name"), _config_json(config), exp_id)

    def create_experiment_with_trials(
        self, config: dict[str, Any], archive: str, trials: list[dict[str, Any]]
    ) -> int:
        """An experiment and all its trials (``hparams``, ``seed``, ``bracket``, ``target``),
        in one transaction: a crash leaves all of them or none."""
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO experiments (name, config, state, archive, created)"
                " VALUES (?, ?, 'ACTIVE', ?, ?)",
                (config.get("name"), _config_json(config), archive, time.time()),
            )
            exp_id = _inserted(cur)
            for t in trials:
                db.execute(
                    "INSERT INTO trials (experiment_id, hparams, seed, state, created, bracket,"
                    " target) VALUES (?, ?, ?, 'QUEUED', ?, ?, ?)",
                    (exp_id, _config_json(t["hparams"]), t["seed"], time.time(), t["bracket"],
                     t["target"]),
                )
            return exp_id

    def trial(self, trial_id: int) -> TrialRow | None:
        return self._one("SELECT * FROM trials WHERE id = ?", trial_id)

    def trials(self, exp_id: int | None = None) -> list[TrialRow]:
        if exp_id is None:
            return self._all("SELECT * FROM trials ORDER BY id")
        return self._all("SELECT * FROM trials WHERE experiment_id = ? ORDER BY id", exp_id)

    def trials_in_states(self, states: Collection[str], exp_id: int | None = None,
                         limit: int = -1) -> list[TrialRow]:
        """The trials in any of ``states`` (of one experiment), oldest first, at most
        ``limit`` (the scheduler's view: it must not decode 10,000 trials every second)."""
        marks = ", ".join("?" for _ in states)
        args: list[Any] = [str(getattr(s, "value", s)) for s in states]
        where = f"state IN ({marks})"
        if exp_id is not None:
            where += " AND experiment_id = ?"
            args.append(exp_id)
        return self._all(f"SELECT * FROM trials WHERE {where} ORDER BY id LIMIT ?", *args,
                         limit)

    def trial_counts(self, states: Collection[str]) -> dict[int, int]:
        """How many trials of each experiment are in any of ``states``."""
        marks = ", ".join("?" for _ in states)
        with self._lock:
            rows = self._db.execute(
                f"SELECT experiment_id, COUNT(*) FROM trials WHERE state IN ({marks})"
                " GROUP BY experiment_id", [str(getattr(s, "value", s)) for s in states])
            return dict(rows.fetchall())

    def experiments_in_states(self, states: Collection[str]) -> list[ExperimentRow]:
        marks = ", ".join("?" for _ in states)
        return self._all(f"SELECT * FROM experiments WHERE state IN ({marks}) ORDER BY id",
                         *[str(getattr(s, "value", s)) for s in states])

    def jobs_in_states(self, states: Collection[str]) -> list[JobRow]:
        marks = ", ".join("?" for _ in states)
        return self._all(f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY id",
                         *[str(getattr(s, "value", s)) for s in states])

    def update_trial(self, trial_id: int, **fields: Any) -> None:
        if not fields:
            return
        if fields.get("state") in ("COMPLETED", "CANCELED", "ERROR"):
            fields.setdefault("ended", time.time())
        if isinstance(fields.get("hparams"), dict):  # as the column keeps them
            fields["hparams"] = _config_json(fields["hparams"])
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._exec(f"UPDATE trials SET {cols} WHERE id = ?", *fields.values(), trial_id)

    # --- searcher state ---------------------------------------------------------------------

    def rung_result(self, trial_id: int, rung: int) -> dict[str, Any] | None:
        return self._one("SELECT * FROM rungs WHERE trial_id = ? AND rung = ?", trial_id, rung)

    def trial_rungs(self, trial_id: int) -> list[dict[str, Any]]:
        """The trial's results at each rung it reached, with the searcher's decisions."""
        return [{"rung": r["rung"], "metric": r["metric"], "promoted": bool(r["promoted"]),
                 "order": r["seq"]}
                for r in self._all("SELECT * FROM rungs WHERE trial_id = ? ORDER BY rung",
                                   trial_id)]

    def experiment_rungs(self, exp_id: int) -> dict[int, list[dict[str, Any]]]:
        """:meth:`trial_rungs` of every trial of an experiment, by trial id, in one query."""
        out: dict[int, list[dict[str, Any]]] = {}
        for r in self._all("SELECT r.* FROM rungs r JOIN trials t ON t.id = r.trial_id"
                           " WHERE t.experiment_id = ? ORDER BY r.trial_id, r.rung", exp_id):
            out.setdefault(r["trial_id"], []).append(
                {"rung": r["rung"], "metric": r["metric"], "promoted": bool(r["promoted"]),
                 "order": r["seq"]})
        return out

    def rung_results(self, exp_id: int, bracket: int, rung: int) -> list[dict[str, Any]]:
        """A rung's results in the order they arrived."""
        return self._all(
            "SELECT r.* FROM rungs r JOIN trials t ON t.id = r.trial_id"
            " WHERE t.experiment_id = ? AND t.bracket = ? AND r.rung = ? ORDER BY r.seq",
            exp_id, bracket, rung)

    def record_rung(self, trial_id: int, rung: int, metric: float, promoted: bool,
                    target: int | None) -> None:
        """A trial's result at a rung and the decision, with its new target, atomically."""
        with self.tx() as db:
            (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM rungs").fetchone()
            db.execute("INSERT INTO rungs VALUES (?, ?, ?, ?, ?)",
                       (trial_id, rung, metric, int(promoted), seq))
            if promoted:
                db.execute("UPDATE trials SET target = ? WHERE id = ?", (target, trial_id))
            else:
                db.execute("UPDATE trials SET searcher_done = 1 WHERE id = ?", (trial_id,))

    # --- jobs ---------------------------------------------------------------------------

    def create_job(self, config: dict[str, Any], archive: str) -> int:
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO jobs (name, config, state, archive, created)"
                " VALUES (?, ?, 'QUEUED', ?, ?)",
                (config.get("name"), _config_json(config), archive, time.time()),
            )
            return _inserted(cur)

    def job(self, job_id: int) -> JobRow | None:
        return self._one("SELECT * FROM jobs WHERE id = ?", job_id)

    def jobs(self) -> list[JobRow]:
        return self._all("SELECT * FROM jobs ORDER BY id")

    def update_job(self, job_id: int, **fields: Any) -> None:
        if fields.get("state") in ("COMPLETED", "CANCELED", "ERROR"):
            fields.setdefault("ended", time.time())
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._exec(f"UPDATE jobs SET {cols} WHERE id = ?", *fields.values(), job_id)

    # --- allocations (running processes) --------------------------------------------------

    def create_allocation(self, alloc: dict[str, Any]) -> None:
        cols = ", ".join(alloc)
        marks = ", ".join("?" for _ in alloc)
        self._exec(f"INSERT INTO allocations ({cols}) VALUES ({marks})", *alloc.values())

    def allocation(self, alloc_id: str) -> AllocationRow | None:
        return self._one("SELECT * FROM allocations WHERE id = ?", alloc_id)

    def running_allocations(self) -> list[AllocationRow]:
        return self._all("SELECT * FROM allocations WHERE state = 'RUNNING' ORDER BY started")

    def update_allocation(self, alloc_id: str, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._exec(f"UPDATE allocations SET {cols} WHERE id = ?", *fields.values(), alloc_id)
        # the token cache holds the state: a token must stop working when its task ends
        self._token_allocations = {
            t: a for t, a in self._token_allocations.items() if a["id"] != alloc_id}

    # --- metrics and checkpoints ----------------------------------------------------------

    def record_metrics(self, trial_id: int, group: str, steps: int, epoch: int,
                       metrics: dict[str, float], searcher_value: float | None,
                       smaller_is_better: bool, states: Collection[str] | None = None,
                       advance: bool = True) -> bool:
        """Store a report and advance the trial's progress and best metric, atomically.

        One value per (trial, group, steps). Returns False if there is no such trial, or
        (with ``states``) it is in none of them: the check and the write are one statement.
        A non-finite searcher value (NaN, +/-Infinity) never becomes the best: it is the
        worst value in both directions (:func:`det_sdk.wire.metric_rank`), and a trial
        without a finite one has ``best_metric`` NULL, which ranks last.
        ``advance=False`` (a stage the searcher does not measure, det_sdk.stages): the
        report is stored, the trial's progress and best metric stay.
        """
        better = "<" if smaller_is_better else ">"
        if searcher_value is not None and not is_rankable(searcher_value):
            searcher_value = None
        where = "id = ?"
        args: list[Any] = [steps, epoch, steps, searcher_value, searcher_value, searcher_value,
                           trial_id]
        if states is not None:
            where += f" AND state IN ({', '.join('?' for _ in states)})"
            args += [str(getattr(s, "value", s)) for s in states]
        with self.tx() as db:
            if advance:
                cur = db.execute(
                    "UPDATE trials SET"
                    " epoch = CASE WHEN ? >= steps_completed THEN ? ELSE epoch END,"
                    " steps_completed = MAX(steps_completed, ?),"
                    f" best_metric = CASE WHEN ? IS NOT NULL AND (best_metric IS NULL"
                    f" OR ? {better} best_metric) THEN ? ELSE best_metric END"
                    f" WHERE {where}", args,
                )
            else:  # the state check alone, in the same statement form
                cur = db.execute(f"UPDATE trials SET state = state WHERE {where}", args[6:])
            if cur.rowcount == 0:
                return False
            db.execute("INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?, ?, ?)",
                       (trial_id, group, steps, epoch, _metrics_json(metrics), time.time()))
        return True

    def metrics(self, trial_id: int, group: str | None = None) -> list[MetricsRow]:
        if group is None:
            return self._all("SELECT * FROM metrics WHERE trial_id = ? ORDER BY steps, grp",
                             trial_id)
        return self._all("SELECT * FROM metrics WHERE trial_id = ? AND grp = ? ORDER BY steps",
                         trial_id, group)

    def metric_stages(self, trial_id: int, metric: str) -> list[dict[str, Any]]:
        """Per stored group of the trial (det_sdk.stages.stored_group): its last step and
        epoch and, for validation groups, the least and greatest finite ``metric``."""
        with self._lock:
            return [dict(r) for r in self._db.execute(
                "SELECT grp, MAX(steps) AS steps, MAX(epoch) AS epoch, MIN(time) AS first,"
                " MIN(CASE WHEN typeof(json_extract(metrics, '$.' || ?)) IN ('real', 'integer')"
                " THEN json_extract(metrics, '$.' || ?) END) AS least,"
                " MAX(CASE WHEN typeof(json_extract(metrics, '$.' || ?)) IN ('real', 'integer')"
                " THEN json_extract(metrics, '$.' || ?) END) AS greatest"
                " FROM metrics WHERE trial_id = ? GROUP BY grp",
                (*(json.dumps(metric),) * 4, trial_id))]

    def put_checkpoint(self, c: dict[str, Any]) -> int:
        """Record a checkpoint unless its uuid is known; returns the trial that owns the uuid.

        A uuid belongs to the trial that first registered it: a second registration
        (a retried report, or another trial's attempt) changes nothing, and the caller
        compares the owner with the reporting trial.
        """
        with self.tx() as db:
            db.execute(
                "INSERT INTO checkpoints (uuid, trial_id, steps, epoch, batch, size, metrics,"
                " created, stage, searched) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(uuid) DO NOTHING",
                (c["uuid"], c["trial_id"], c["steps_completed"], c["epoch"], c.get("batch", 0),
                 c.get("size", 0), _metrics_json(c.get("metrics", {})), time.time(),
                 c.get("stage"), None if c.get("searched", True) else 0),
            )
            (owner,) = db.execute("SELECT trial_id FROM checkpoints WHERE uuid = ?",
                                  (c["uuid"],)).fetchone()
        return int(owner)

    def checkpoint(self, uuid: str) -> CheckpointRow | None:
        return self._one("SELECT * FROM checkpoints WHERE uuid = ?", uuid)

    def checkpoints(self, trial_id: int | None = None) -> list[CheckpointRow]:
        if trial_id is None:
            return self._all("SELECT * FROM checkpoints ORDER BY trial_id, steps")
        return self._all("SELECT * FROM checkpoints WHERE trial_id = ? ORDER BY steps, created",
                         trial_id)

    def mark_checkpoint_damaged(self, uuid: str, reason: str) -> None:
        self._exec("UPDATE checkpoints SET damaged = ? WHERE uuid = ?", reason, uuid)

    def delete_checkpoint(self, uuid: str) -> None:
        self._exec("DELETE FROM checkpoints WHERE uuid = ?", uuid)

    # --- read-only queries for the web UI (det_sdk.master.ui) ------------------------------
    # (its lists read the pages below: experiment_page, job_page)

    def metric_columns(self, trial_id: int, group: str, after_steps: int | None = None
                       ) -> tuple[str, str, str, str] | None:
        """A trial group's reports past ``after_steps`` (all if None) in steps order, as
        columns: steps, epochs and times comma-separated, and the metrics as one JSON
        array; None if there are none. Only a primary-key range is read.

        Columns, because one ``json.loads`` of a 5 MB array and three ``split``s cost a
        third of 100,000 row tuples and 100,000 ``json.loads`` (the first view of a long
        trial). SQLite concatenates in the subquery's order in practice; the caller
        checks the steps are sorted rather than rely on it.
        """
        with self._lock:
            row = self._db.execute(
                "SELECT group_concat(steps), group_concat(epoch), group_concat(time),"
                " '[' || group_concat(metrics) || ']' FROM (SELECT steps, epoch, time, metrics"
                " FROM metrics WHERE trial_id = ? AND grp = ? AND steps > ? ORDER BY steps)",
                (trial_id, group, -1 if after_steps is None else after_steps)).fetchone()
        return None if row[0] is None else tuple(row)

    def metric_group_ends(self, trial_id: int) -> dict[str, int]:
        """The last step of each metric group the trial has reported (one index probe
        each, where a COUNT would read every row): pages poll this to see new metrics."""
        out = {}
        with self._lock:
            for grp in ("training", "validation", "evaluation"):
                (last,) = self._db.execute(
                    "SELECT MAX(steps) FROM metrics WHERE trial_id = ? AND grp = ?",
                    (trial_id, grp)).fetchone()
                if last is not None:
                    out[grp] = last
        return out

    def best_trials(self, exp_id: int, limit: int, smaller_is_better: bool = True
                    ) -> tuple[list[int], int]:
        """The ids of the experiment's ``limit`` best trials by ``best_metric`` (trials
        without one last, ties by id), in id order; and how many trials it has.

        Two statements, both on the ``trials_summary`` index alone (it holds
        ``best_metric``): the best are a top-``limit`` sort of the experiment's index
        entries, never of its metric rows.

        >>> s = Store(":memory:")
        >>> exp = s.create_experiment_with_trials({}, "a", [
        ...     {"hparams": {}, "seed": 0, "bracket": 0, "target": None}] * 4)
        >>> for t, m in zip(s.trials(exp), [0.3, None, 0.1, 0.2]):
        ...     s.update_trial(t["id"], best_metric=m)
        >>> s.best_trials(exp, 2)
        ([3, 4], 4)
        >>> s.best_trials(exp, 3, smaller_is_better=False)
        ([1, 3, 4], 4)
        """
        order = "" if smaller_is_better else " DESC"
        with self._lock:
            ids = [r[0] for r in self._db.execute(
                "SELECT id FROM trials WHERE experiment_id = ?"
                f" ORDER BY best_metric IS NULL, best_metric{order}, id LIMIT ?",
                (exp_id, limit))]
            (total,) = self._db.execute(
                "SELECT COUNT(*) FROM trials WHERE experiment_id = ?", (exp_id,)).fetchone()
        return sorted(ids), int(total)

    def validation_metric(self, trial_ids: Sequence[int], metric: str
                          ) -> list[tuple[int, int, int, Any]]:
        """One validation metric of these trials: ``(trial_id, steps, epoch, value)`` rows
        in trial and steps order (the experiment page's learning curves). The value is
        None where a report lacks the metric, ``"NaN"``/``"Infinity"`` where it was not
        finite (``det_sdk.api.encode_metric``). A primary-key range per trial.

        >>> s = Store(":memory:")
        >>> exp = s.create_experiment_with_trials({}, "a", [
        ...     {"hparams": {}, "seed": 0, "bracket": 0, "target": None}])
        >>> _ = s.record_metrics(1, "validation", 10, 1, {"val_loss": 0.5}, 0.5, True)
        >>> _ = s.record_metrics(1, "validation", 20, 2, {"acc": 0.9}, None, True)
        >>> s.validation_metric([1], "val_loss")
        [(1, 10, 1, 0.5), (1, 20, 2, None)]
        """
        if not trial_ids:
            return []
        with self._lock:
            return [tuple(r) for r in self._db.execute(
                "SELECT trial_id, steps, epoch, json_extract(metrics, '$.' || ?) FROM metrics"
                f" WHERE trial_id IN ({', '.join('?' for _ in trial_ids)})"
                " AND grp = 'validation' ORDER BY trial_id, steps",
                (json.dumps(metric), *trial_ids))]

    def latest_metrics(self, exp_id: int, group: str) -> dict[int, dict[str, Any]]:
        """Each trial's latest metrics of ``group`` in the experiment, by trial id."""
        rows = self._all(
            "SELECT m.trial_id, m.metrics FROM metrics m JOIN trials t ON t.id = m.trial_id"
            " WHERE t.experiment_id = ? AND m.grp = ? AND m.steps = (SELECT MAX(steps)"
            " FROM metrics WHERE trial_id = m.trial_id AND grp = m.grp)", exp_id, group)
        return {r["trial_id"]: r["metrics"] for r in rows}

    # --- pages (det_sdk.master.pages): keyset reads ------------------------------------------
    # Each reads one page in a fixed number of statements, whatever the history holds:
    # ``WHERE key < last ORDER BY key DESC LIMIT n`` walks an index from the cursor, where
    # OFFSET would read and drop every row before the page.

    def experiment_page(self, before_id: int | None, limit: int,
                        archived: bool | None = None
                        ) -> tuple[list[ExperimentSummaryRow], int]:
        """Up to ``limit`` experiments with ids below ``before_id`` (from the newest if
        None), newest first, each with its trials' counts by state, mean progress and best
        metrics; and how many experiments there are. Three statements. ``archived``:
        only the archived (True) or the others (False); None: all.

        >>> s = Store(":memory:")
        >>> _ = [s.create_experiment_with_trials({"name": n}, "a", []) for n in "xyz"]
        >>> rows, total = s.experiment_page(None, 2)
        >>> [r["name"] for r in rows], total
        (['z', 'y'], 3)
        """
        archived_filter = "" if archived is None else " AND archived = ?"
        archived_arg = () if archived is None else (int(archived),)
        with self._lock:
            exps = [dict(r) for r in self._db.execute(
                "SELECT id, name, state, created, ended,"
                " json_extract(config, '$.searcher.name') AS searcher,"
                " json_extract(config, '$.searcher.metric') AS metric,"
                " json_extract(config, '$.searcher.smaller_is_better') AS smaller_is_better,"
                " archived FROM experiments WHERE id < ?"
                f"{archived_filter} ORDER BY id DESC LIMIT ?",
                (_before(before_id), *archived_arg, limit))]
            aggregates = self._db.execute(
                "SELECT experiment_id, state, COUNT(*), SUM(progress), MIN(best_metric),"
                " MAX(best_metric) FROM trials WHERE experiment_id IN"
                f" ({', '.join('?' for _ in exps)}) GROUP BY experiment_id, state",
                [e["id"] for e in exps]).fetchall() if exps else []
            (total,) = self._db.execute(
                f"SELECT COUNT(*) FROM experiments WHERE 1{archived_filter}",
                archived_arg).fetchone()
        by_id = {e["id"]: e for e in exps}
        for e in exps:
            e.update(trial_states={}, trials=0, progress=0.0, best_min=None, best_max=None)
        for exp_id, state, n, progress, lo, hi in aggregates:
            e = by_id[exp_id]
            e["trial_states"][state] = n
            e["trials"] += n
            e["progress"] += progress or 0.0
            e["best_min"] = lo if e["best_min"] is None or (
                lo is not None and lo < e["best_min"]) else e["best_min"]
            e["best_max"] = hi if e["best_max"] is None or (
                hi is not None and hi > e["best_max"]) else e["best_max"]
        for e in exps:
            e["progress"] = e["progress"] / e["trials"] if e["trials"] else 0.0
        # SQLite's rows are plain dicts of exactly the row type's columns
        return cast("list[ExperimentSummaryRow]", exps), int(total)

    def trial_page(self, exp_id: int, after_id: int | None, limit: int
                   ) -> tuple[list[TrialRow], dict[int, list[dict[str, Any]]]]:
        """Up to ``limit`` trials of an experiment with ids above ``after_id``, in id order
        (the order the searcher created them), with their rung results by trial id. Two
        statements, both through an index."""
        with self._lock:
            trials = [_row(r) for r in self._db.execute(
                "SELECT * FROM trials WHERE experiment_id = ? AND id > ? ORDER BY id LIMIT ?",
                (exp_id, -1 if after_id is None else after_id, limit))]
            rungs = self._db.execute(
                "SELECT * FROM rungs WHERE trial_id IN"
                f" ({', '.join('?' for _ in trials)}) ORDER BY trial_id, rung",
                [t["id"] for t in trials if t is not None]).fetchall() if trials else []
        out: dict[int, list[dict[str, Any]]] = {}
        for r in rungs:
            out.setdefault(r["trial_id"], []).append(
                {"rung": r["rung"], "metric": r["metric"], "promoted": bool(r["promoted"]),
                 "order": r["seq"]})
        # SQLite's rows are plain dicts of exactly the row type's columns
        return cast("list[TrialRow]", trials), out

    def trial_state_counts(self, exp_id: int) -> tuple[dict[str, int], float]:
        """How many of an experiment's trials are in each state, and their mean progress."""
        with self._lock:
            rows = self._db.execute(
                "SELECT state, COUNT(*), SUM(progress) FROM trials WHERE experiment_id = ?"
                " GROUP BY state", (exp_id,)).fetchall()
        n = sum(r[1] for r in rows)
        return {r[0]: r[1] for r in rows}, (sum(r[2] or 0.0 for r in rows) / n if n else 0.0)

    def job_page(self, before_id: int | None, limit: int) -> tuple[list[JobSummaryRow], int]:
        """Up to ``limit`` jobs with ids below ``before_id``, newest first, and how many
        jobs there are."""
        with self._lock:
            jobs = [dict(r) for r in self._db.execute(
                "SELECT id, name, state, exit_code, created, ended,"
                " json_extract(config, '$.entrypoint_script') AS entrypoint,"
                " json_extract(config, '$.resources.slots') AS slots,"
                " rows_done, rows_total"
                " FROM jobs WHERE id < ? ORDER BY id DESC LIMIT ?",
                (_before(before_id), limit))]
            (total,) = self._db.execute("SELECT COUNT(*) FROM jobs").fetchone()
        # SQLite's rows are plain dicts of exactly the row type's columns
        return cast("list[JobSummaryRow]", jobs), int(total)

    def checkpoint_page(self, trial_id: int | None, before_seq: int | None, limit: int
                        ) -> tuple[list[CheckpointListRow], int]:
        """Up to ``limit`` checkpoints (of one trial) recorded before ``before_seq``, newest
        first, with each one's experiment and its ``checkpoint_storage`` (JSON text); and
        how many there are."""
        where, args = "c.rowid < ?", [_before(before_seq)]
        if trial_id is not None:
            where, args = f"c.trial_id = ? AND {where}", [trial_id, *args]
        with self._lock:
            rows = [_row(r) for r in self._db.execute(
                "SELECT c.rowid AS seq, c.*, t.experiment_id,"
                " json_extract(e.config, '$.checkpoint_storage') AS storage"
                " FROM checkpoints c LEFT JOIN trials t ON t.id = c.trial_id"
                f" LEFT JOIN experiments e ON e.id = t.experiment_id WHERE {where}"
                " ORDER BY c.rowid DESC LIMIT ?", (*args, limit))]
            (total,) = self._db.execute(
                "SELECT COUNT(*) FROM checkpoints" if trial_id is None else
                "SELECT COUNT(*) FROM checkpoints WHERE trial_id = ?",
                () if trial_id is None else (trial_id,)).fetchone()
        # SQLite's rows are plain dicts of exactly the row type's columns
        return cast("list[CheckpointListRow]", rows), int(total)

    def metrics_after(self, trial_id: int, group: str, after_steps: int | None,
                      limit: int) -> list[MetricsRow]:
        """A trial group's first ``limit`` reports past ``after_steps``, in steps order (a
        primary-key range)."""
        return self._all(
            "SELECT * FROM metrics WHERE trial_id = ? AND grp = ? AND steps > ?"
            " ORDER BY steps LIMIT ?", trial_id, group,
            -1 if after_steps is None else after_steps, limit)


def _before(key: int | None) -> int:
    """The exclusive upper bound of a newest-first page: past the largest rowid if None."""
    return 2**63 - 1 if key is None else key


def _inserted(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just made (sqlite3 types ``lastrowid`` as optional)."""
    assert cur.lastrowid is not None  # an INSERT was executed on this cursor
    return int(cur.lastrowid)
