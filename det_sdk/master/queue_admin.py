"""Steering the queue (det_sdk.master.queue): an experiment's ``resources.priority``,
``weight`` and ``max_slots`` (``det e set priority|weight|max-slots``), a batch job's
priority (``det job update ID --priority N``), and the queue as ``det job list`` shows it.

A change is written into the stored config (validated as a create validates it) and the
scheduler woken: a raised priority may start or preempt at once, a lowered one may be
preempted by what waits.

>>> [r["job_id"] for r in sort_queue([{"type": "EXPERIMENT", "id": 1, "submitted": 1.0},
...                                    {"type": "BATCH_JOB", "id": 2, "submitted": 2.0,
...                                     "priority": 5}])]
['job-2', 'experiment-1']
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound
from det_sdk.master.queue import DEFAULT_PRIORITY, priority_of
from det_sdk.master.store.database import config_json

__all__ = ["ENDED", "queue_job_id", "set_experiment_resources",
           "set_job_priority", "sort_queue"]

log = logging.getLogger("det_sdk.master.queue")

ENDED = ("COMPLETED", "CANCELED", "ERROR")


def queue_job_id(row: dict[str, Any]) -> str:
    """A queue row's job id, as ``det job update`` takes it: ``experiment-3``, ``job-5``
    (a batch job), ``command-2``...

    >>> queue_job_id({"type": "EXPERIMENT", "id": 3}), queue_job_id({"type": "BATCH_JOB", "id": 5})
    ('experiment-3', 'job-5')
    """
    kind = {"EXPERIMENT": "experiment", "BATCH_JOB": "job"}.get(row["type"],
                                                                 str(row["type"]).lower())
    return f"{kind}-{row['id']}"


def sort_queue(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The queue in the order it runs: priority, then submission time (rows without a
    priority, commands, have Determined's default); each gets its ``job_id``."""
    for r in rows:
        r.setdefault("priority", DEFAULT_PRIORITY)
        r["job_id"] = queue_job_id(r)
    return sorted(rows, key=lambda r: (r["priority"], r["submitted"]))


def _check(name: str, value: Any, lo: float, hi: float, integer: bool) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not lo <= value <= hi or value != value:
        kind = "an integer" if integer else "a number"
        raise InvalidRequest(f"resources.{name}: expected {kind} from {lo:g} to {hi:g}, "
                             f"got {value!r}")


def set_experiment_resources(master: Any, exp_id: int, priority: int | None = None,
                             weight: float | None = None,
                             max_slots: int | None = None) -> dict[str, Any]:
    """Set the experiment's queue fields; returns its ``resources`` after. An ended
    experiment is refused (409): it waits for nothing."""
    from det_sdk.master.core import experiment_config

    if priority is not None:
        _check("priority", priority, 1, 99, True)
    if weight is not None:
        _check("weight", weight, 1e-9, 1e6, False)
    if max_slots is not None:
        _check("max_slots", max_slots, 1, 1_000_000, True)
    with master.lifecycle.lock:
        exp = master.store.experiment(exp_id)
        if exp is None:
            raise NotFound(f"no experiment {exp_id}")
        if exp["state"] in ENDED:
            raise Conflict(f"experiment {exp_id} is {exp['state']}: its resources no "
                           "longer matter")
        config = copy.deepcopy(exp["config"])  # nothing half-written if refused
        resources = config.setdefault("resources", {})
        for key, value in (("priority", priority), ("weight", weight),
                           ("max_slots", max_slots)):
            if value is not None:
                resources[key] = value
        experiment_config(config)  # max_slots under slots_per_trial: refused here
        master.store.set_experiment_config(exp_id, config)
        master._configs.pop(exp_id, None)  # the parsed config is cached per experiment
        log.info("experiment %d: resources %s", exp_id, resources)
    master._wake()
    return {k: resources.get(k) for k in ("priority", "weight", "max_slots")}


def set_job_priority(master: Any, job_id: int, priority: int) -> dict[str, Any]:
    """A batch job's priority; returns ``{"priority"}``. An ended job is refused (409)."""
    _check("priority", priority, 1, 99, True)
    with master.lifecycle.lock:
        job = master.store.job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        if job["state"] in ENDED:
            raise Conflict(f"job {job_id} is {job['state']}: its priority no longer matters")
        config = copy.deepcopy(job["config"])
        config.setdefault("resources", {})["priority"] = priority
        master.store.update_job(job_id, config=config_json(config))
        log.info("job %d: priority %d", job_id, priority)
    master._wake()
    return {"priority": priority_of(config)}
