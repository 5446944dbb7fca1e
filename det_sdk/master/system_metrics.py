"""The profiler's system metrics on the master (det_sdk.profiler reports them): what the
routes call (det_sdk.master.routes.profiler), over the store's ``system_metrics`` table,
and the cluster's slots with who holds them and their GPUs' use now (``det slot list``).

>>> flat({"h": {"cpu_util_simple": 5.0, "/": {"disk_util": 40.0}}})
{'h · cpu_util_simple': 5.0, 'h · / · disk_util': 40.0}
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHART_GROUPS", "chart_series", "flat", "read", "record", "slots"]

#: the groups the trial page charts, in its order
CHART_GROUPS = ("cpu", "memory", "disk", "network", "gpu", "timings")
#: records of a group the trial page charts at most (the first; later ones are left out)
CHART_RECORDS = 2000


def record(master: Any, trial_id: int, records: list[dict[str, Any]]) -> int:
    """Store a trial's records (404 if there is no such trial); how many were kept."""
    master.trial(trial_id)
    return int(master.store.record_system_metrics(trial_id, records))


def read(master: Any, trial_id: int, group: str | None, after_id: int,
         limit: int) -> list[dict[str, Any]]:
    """A trial's records of ``group`` (all if None) past ``after_id``, oldest first."""
    master.trial(trial_id)
    return list(master.store.system_metrics(trial_id, group, after_id, limit))


def flat(metrics: dict[str, Any]) -> dict[str, float]:
    """A record's metrics as one series name each (``host · [gpu ·] metric``)."""
    out: dict[str, float] = {}
    for host, values in metrics.items():
        for name, v in values.items():
            if isinstance(v, dict):
                out.update({f"{host} · {name} · {k}": x for k, x in v.items()})
            else:
                out[f"{host} · {name}"] = v
    return out


def chart_series(master: Any, trial_id: int) -> dict[str, Any]:
    """Per group, the records' times and one series per host, GPU and metric (None
    where a record lacks it): what the trial page's Profiler section draws."""
    master.trial(trial_id)
    groups: dict[str, Any] = {}
    for group in CHART_GROUPS:
        rows = master.store.system_metrics(trial_id, group, 0, CHART_RECORDS)
        if not rows:
            continue
        series: dict[str, list[float | None]] = {}
        for i, r in enumerate(rows):
            for name, v in flat(r["metrics"]).items():
                series.setdefault(name, [None] * len(rows))[i] = v
        groups[group] = {"time": [r["time"] for r in rows], "series": series}
    return {"groups": groups}


def slots(master: Any) -> list[dict[str, Any]]:
    """The master's slots, each with the task that holds it (None: free) and, for a
    trial, the GPUs' use its profiler reported last. The local resource manager counts
    slots, it does not pin them: running tasks fill them in the order they started."""
    running = master.store.running_allocations()
    gpu = master.store.latest_system_metrics(
        [a["trial_id"] for a in running if a["trial_id"] is not None], "gpu")
    holders: list[dict[str, Any] | None] = []
    for a in running:
        task = f"trial-{a['trial_id']}" if a["trial_id"] is not None else f"job-{a['job_id']}"
        held = {"allocation_id": a["id"], "task_id": task, "type": a["task_type"],
                "gpus": gpu.get(a["trial_id"])}
        holders += [held] * int(a["slots"])
    total = max(int(master.launcher.slots), len(holders))
    holders += [None] * (total - len(holders))
    return [{"slot": i, **(h or {"allocation_id": None, "task_id": None, "type": None,
                                 "gpus": None})} for i, h in enumerate(holders)]
