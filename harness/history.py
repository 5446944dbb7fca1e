"""Finished experiments written straight into a master's SQLite database, for the tests
and benchmarks of long histories (paging, `det experiment list`).

>>> import tempfile
>>> len(fill_history(Path(tempfile.mkdtemp()) / "master.db", 10))
10
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

STATES = ("COMPLETED", "CANCELED", "ERROR", "PAUSED")


def _stored_config(name: str) -> str:
    """An experiment config as the master stores it (validated, defaults filled in)."""
    from det_sdk.config import ExperimentConfig

    cfg = ExperimentConfig.model_validate({
        "name": name, "entrypoint_script": "python3 train.py",
        "hyperparameters": {"learning_rate": 0.01, "global_batch_size": 32},
        "searcher": {"name": "random", "metric": "val_loss", "max_trials": 3,
                     "max_length": {"batches": 100}}})
    return json.dumps(cfg.model_dump(mode="json", exclude_none=False))


def fill_history(db_path: Path, experiments: int, trials_per_experiment: int = 3,
                 checkpoints_per_trial: int = 1, jobs: int = 0,
                 name: str = "hist") -> list[int]:
    """Add finished experiments (with trials, metrics and checkpoint records) and jobs to a
    master's database, straight through SQLite in one transaction: about 100,000 rows a
    second, where the API would create (and the scheduler would run) each one.

    Not the master's own path: the rows are what it would have written (a validated
    config, trials with progress and best metric, a validation report and checkpoint
    rows per trial) and are in states nothing schedules (COMPLETED, CANCELED, ERROR,
    PAUSED), so a running master may be the one that owns ``db_path`` (SQLite WAL lets
    another connection write). The schema comes from ``det_sdk.master.store.Store``.
    Returns the new experiments' ids, oldest first.
    """
    import time

    from det_sdk.master.store import Store

    db_path.parent.mkdir(parents=True, exist_ok=True)
    Store(db_path)  # the schema and indexes, as the master makes them (closed at once)
    config = _stored_config(name)
    now = time.time()
    ids = []
    with contextlib.closing(sqlite3.connect(db_path, timeout=30)) as db:
        db.execute("BEGIN IMMEDIATE")
        for i in range(experiments):
            state = STATES[i % len(STATES)]
            cur = db.execute(
                "INSERT INTO experiments (name, config, state, archive, created, ended)"
                " VALUES (?, ?, ?, '', ?, ?)",
                (f"{name}-{i}", config, state, now - experiments + i,
                 None if state == "PAUSED" else now))
            exp_id = int(cur.lastrowid)  # type: ignore[arg-type]
            ids.append(exp_id)
            for k in range(trials_per_experiment):
                progress = 0.5 if state == "PAUSED" else 1.0
                cur = db.execute(
                    "INSERT INTO trials (experiment_id, hparams, seed, state, steps_completed,"
                    " epoch, progress, best_metric, created) VALUES (?, ?, ?, ?, 100, 1, ?, ?, ?)",
                    (exp_id, json.dumps({"learning_rate": 0.01 * (k + 1)}), k, state, progress,
                     0.5 / (k + 1), now))
                trial_id = int(cur.lastrowid)  # type: ignore[arg-type]
                db.execute("INSERT INTO metrics VALUES (?, 'validation', 100, 1, ?, ?)",
                           (trial_id, json.dumps({"val_loss": 0.5 / (k + 1)}), now))
                for c in range(checkpoints_per_trial):
                    db.execute("INSERT INTO checkpoints (uuid, trial_id, steps, epoch, batch,"
                               " size, metrics, created) VALUES (?, ?, ?, 1, 0, 1000, ?, ?)",
                               (f"{trial_id:08x}-0000-4000-8000-{c:012x}", trial_id,
                                100 * (c + 1), json.dumps({"val_loss": 0.5}), now))
        for j in range(jobs):
            db.execute("INSERT INTO jobs (name, config, state, archive, exit_code, created,"
                       " ended) VALUES (?, ?, 'COMPLETED', '', 0, ?, ?)",
                       (f"{name}-job-{j}", json.dumps({"entrypoint_script": "python3 bi.py",
                                                       "resources": {"slots": 1}}), now, now))
        db.execute("COMMIT")
    return ids
