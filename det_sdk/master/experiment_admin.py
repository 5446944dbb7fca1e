"""What Determined's ``det experiment archive/unarchive/cancel/delete/set/label``,
``det trial kill`` and ``det checkpoint delete`` do, over a ``det_sdk.master.core.Master``.

Kept apart from the master's core (training, scheduling): these edit what a user sees of
finished work. An experiment's name is its own column; its description and labels live in
its config, where Determined's experiment config has them (``description``, ``labels``).
Deleting removes the records and the files: checkpoints (those its trials wrote), logs,
the kept working directories and the uploaded model directory.

>>> # ExperimentAdmin(master).archive(3, True)
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound
from det_sdk.master.lifecycle import ExperimentEvent, TrialEvent
from det_sdk.master.models import registered_checkpoints
from det_sdk.master.queue import DEFAULT_PRIORITY, priority_of
from det_sdk.master.queue_admin import sort_queue

__all__ = ["ENDED", "ExperimentAdmin", "job_queue", "running_tasks"]

ENDED = ("COMPLETED", "CANCELED", "ERROR")
MAX_LABEL = 255  # a label's length (Determined's labels are short tags)


class ExperimentAdmin:
    """Archive, rename, label, cancel and delete experiments; kill trials; delete
    checkpoints. ``master``: a ``det_sdk.master.core.Master``."""

    def __init__(self, master: Any) -> None:
        self.master = master
        self.store = master.store

    def _experiment(self, exp_id: int) -> dict[str, Any]:
        exp = self.store.experiment(exp_id)
        if exp is None:
            raise NotFound(f"no experiment {exp_id}")
        return dict(exp)

    # --- attributes ---------------------------------------------------------------------

    def archive(self, exp_id: int, archived: bool) -> None:
        """Archived experiments are left out of ``det experiment list`` (unless --all);
        as in Determined, only an ended experiment can be archived."""
        exp = self._experiment(exp_id)
        if archived and exp["state"] not in ENDED:
            raise Conflict(f"experiment {exp_id} is {exp['state']}: only an ended experiment "
                           "(COMPLETED, CANCELED, ERROR) can be archived")
        self.store._exec("UPDATE experiments SET archived = ? WHERE id = ?", int(archived),
                         exp_id)

    def edit(self, exp_id: int, name: str | None = None, description: str | None = None,
             labels: list[str] | None = None) -> dict[str, Any]:
        """Set the name, the description (config ``description``) or the labels (config
        ``labels``); returns ``{"name", "description", "labels"}`` after."""
        exp = self._experiment(exp_id)
        config = dict(exp["config"])
        if name is not None:
            if not name.strip():
                raise InvalidRequest("name: expected a non-empty name")
            config["name"] = name
        if description is not None:
            config["description"] = description
        if labels is not None:
            for label in labels:
                if not label or len(label) > MAX_LABEL:
                    raise InvalidRequest(f"labels: expected 1 to {MAX_LABEL} characters, got "
                                         f"{label!r}")
            config["labels"] = list(dict.fromkeys(labels))  # once each, in order
        with self.store.tx() as db:
            db.execute("UPDATE experiments SET name = ?, config = ? WHERE id = ?",
                       (config.get("name"), json.dumps(config), exp_id))
        return {"name": config.get("name"), "description": config.get("description"),
                "labels": config.get("labels") or []}

    # --- stopping -----------------------------------------------------------------------

    def cancel(self, exp_id: int) -> str:
        """Determined's cancel: the trials are asked to stop (checkpoint and exit, as for
        a pause) and end CANCELED; no process is killed (``kill`` does that)."""
        self.master.lifecycle.experiment_event(exp_id, ExperimentEvent.KILL)
        return str(self.master.experiment_state(exp_id))

    def kill_trial(self, trial_id: int) -> str:
        """Determined's ``det trial kill``: this trial's process is stopped at once and
        the trial ends CANCELED; the experiment's other trials go on."""
        lifecycle = self.master.lifecycle
        state = lifecycle.trial_event(trial_id, TrialEvent.KILL)
        for alloc in self.store.running_allocations():
            if alloc["trial_id"] == trial_id:
                self.master.launcher.kill(alloc)
        return str(state.value)

    # --- deleting -----------------------------------------------------------------------

    def delete_checkpoints(self, uuids: list[str]) -> list[str]:
        """Delete checkpoints (files, then records); refused, all of them, when one is
        unknown or a model version points at it (as Determined refuses). Returns where
        their files were."""
        rows = []
        for uuid in uuids:
            row = self.store.checkpoint(uuid)
            if row is None:
                raise NotFound(f"no checkpoint {uuid!r}")
            rows.append(row)
        registered = registered_checkpoints(self.store) & set(uuids)
        if registered:
            raise Conflict(f"checkpoints {', '.join(sorted(registered))} are versions of "
                           "models in the registry: delete those model versions first")
        return self.master.checkpoint_store.delete(rows)

    def delete_experiment(self, exp_id: int) -> None:
        """Delete an ended experiment and everything it left: its checkpoints' files, its
        trials' logs and kept files, its uploaded model directory, its records."""
        exp = self._experiment(exp_id)
        if exp["state"] not in ENDED:
            raise Conflict(f"experiment {exp_id} is {exp['state']}: kill it and wait until it "
                           "has ended before deleting it")
        trial_ids = [t["id"] for t in self.store.trials(exp_id)]
        uuids = [c["uuid"] for t in trial_ids for c in self.store.checkpoints(t)]
        self.delete_checkpoints(uuids)  # refused if a model version points at one
        for t in trial_ids:
            shutil.rmtree(self.master.logs_path("trials", t).parent, ignore_errors=True)
        marks = ", ".join("?" for _ in trial_ids) or "NULL"
        with self.store.tx() as db:
            for table, column in (("metrics", "trial_id"), ("rungs", "trial_id"),
                                  ("allocations", "trial_id")):
                db.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", trial_ids)
            for table in _extra_trial_tables(db):
                db.execute(f"DELETE FROM {table} WHERE trial_id IN ({marks})", trial_ids)
            db.execute("DELETE FROM trials WHERE experiment_id = ?", (exp_id,))
            db.execute("DELETE FROM experiments WHERE id = ?", (exp_id,))
        with contextlib.suppress(OSError):
            Path(exp["archive"]).unlink()


#: the states of work the scheduler holds: waiting for slots, or running on them
_QUEUED_OR_RUNNING = ("QUEUED", "RUNNING", "STOPPING_PAUSED", "STOPPING_CANCELED")


def job_queue(master: Any) -> list[dict[str, Any]]:
    """Determined's job queue (``det job list``): each experiment with trials waiting
    for or holding slots, and each batch job, in the order they run (priority, then
    submission: det_sdk.master.queue): slots held and needed, QUEUED or SCHEDULED."""
    held: dict[tuple[str, int], int] = {}
    for a in master.store.running_allocations():
        key = ("trial", a["trial_id"]) if a["trial_id"] is not None else ("job", a["job_id"])
        held[key] = held.get(key, 0) + int(a["slots"])
    rows: list[dict[str, Any]] = []
    by_exp: dict[int, list[Any]] = {}
    for t in master.store.trials_in_states(_QUEUED_OR_RUNNING):
        by_exp.setdefault(t["experiment_id"], []).append(t)
    for exp_id, trials in by_exp.items():
        exp = master.store.experiment(exp_id)
        per_trial = master.trial_config(trials[0]["id"]).resources.slots_per_trial
        acquired = sum(held.get(("trial", t["id"]), 0) for t in trials)
        rows.append({"type": "EXPERIMENT", "id": exp_id, "name": exp["name"] if exp else None,
                     "priority": priority_of(exp["config"]) if exp else DEFAULT_PRIORITY,
                     "submitted": exp["created"] if exp else 0.0, "acquired": acquired,
                     "needed": per_trial * len(trials),
                     "state": "SCHEDULED" if acquired else "QUEUED"})
    for j in master.store.jobs_in_states(_QUEUED_OR_RUNNING):
        acquired = held.get(("job", j["id"]), 0)
        rows.append({"type": "BATCH_JOB", "id": j["id"], "name": j["name"],
                     "priority": priority_of(j["config"]),
                     "submitted": j["created"], "acquired": acquired,
                     "needed": int((j["config"].get("resources") or {}).get("slots", 1)),
                     "state": "SCHEDULED" if acquired else "QUEUED"})
    rows += master.commands.queue_rows()  # det cmd run (issue 58)
    return sort_queue(rows)  # the order it runs in (det_sdk.master.queue)


def running_tasks(master: Any) -> list[dict[str, Any]]:
    """The allocations running now (``det task list``): which trial or job, its state
    and slots, oldest first."""
    return [{"id": a["id"], "type": a["task_type"], "trial_id": a["trial_id"],
             "job_id": a["job_id"], "state": a["state"], "slots": a["slots"],
             "started": a["started"]} for a in master.store.running_allocations()]


def _extra_trial_tables(db: sqlite3.Connection) -> list[str]:
    """Tables other modules added that hold rows per trial (a ``trial_id`` column)."""
    known = {"metrics", "rungs", "allocations", "checkpoints", "trials"}
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return [n for n in names if n not in known and any(
        col[1] == "trial_id" for col in db.execute(f"PRAGMA table_info({n})"))]
