"""The profiler's system metrics (det_sdk.profiler): a trial's process reports them,
the user and the trial's own task read them, the web UI's Profiler section charts them.

``POST /api/v1/trials/{id}/system-metrics`` takes a batch of records (a task's token:
its own trial only); ``GET`` the same path pages through them by ``after_id``;
``GET /ui/api/trials/{id}/system-metrics`` gives the UI the series to chart, one per
host, GPU and metric. Bounded: a request carries at most :data:`MAX_RECORDS` records of
small nested mappings; a trial keeps at most ``MAX_ROWS_PER_TRIAL`` of them (the
store's ``system_metrics`` module). ``GET /api/v1/slots`` (``det slot list``): the
slots, who holds each, and its GPUs' use now. The work is det_sdk.master.system_metrics'.

>>> SystemMetricsReport.model_validate({"records": []}).records
[]
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from det_sdk import api
from det_sdk.master import system_metrics as sysmet
from det_sdk.master.core import Master
from det_sdk.master.routes.common import Dependency, Id, Principal, own_trial
from det_sdk.master.security import Sessions
from det_sdk.master.ui.web import UiAuth, json_response

__all__ = ["MAX_RECORDS", "SystemMetricRecord", "SystemMetricsReport", "profiler_router"]

#: records one report carries at most (the profiler sends six a report)
MAX_RECORDS = 100
_GROUP = r"^[a-z][a-z0-9_]{0,31}$"

Key = Annotated[str, StringConstraints(min_length=1, max_length=128)]
# strict: a JSON number only (false or "5" would pass as 0.0 or 5.0 otherwise; an int is
# a number)
Value = Annotated[float, Field(allow_inf_nan=False, strict=True)]
# a host's metrics: a number, or one level more (a GPU's, a disk path's)
HostMetrics = Annotated[dict[Key, Value | Annotated[dict[Key, Value], Field(max_length=64)]],
                        Field(max_length=64)]


class SystemMetricRecord(BaseModel):
    """One group's mean over a report's samples, per host (Determined's shape)."""

    model_config = ConfigDict(extra="forbid")
    group: Annotated[str, StringConstraints(pattern=_GROUP)]
    time: Annotated[float, Field(ge=0, le=1e11, strict=True)]
    steps_completed: api.Count | None = None
    metrics: Annotated[dict[Key, HostMetrics], Field(max_length=16)]


class SystemMetricsReport(BaseModel):
    """``POST /api/v1/trials/{id}/system-metrics``: a batch of records."""

    model_config = ConfigDict(extra="forbid")
    records: Annotated[list[SystemMetricRecord], Field(max_length=MAX_RECORDS)]


class SystemMetricsStored(BaseModel):
    """How many records were stored, and how many refused (the trial's limit reached)."""

    stored: int
    dropped: int


class SystemMetricRow(SystemMetricRecord):
    """A stored record, with the id that pages (``after_id``)."""

    id: int


class SlotRow(BaseModel):
    """``GET /api/v1/slots``: one slot and who holds it (None: free)."""

    slot: int
    allocation_id: str | None
    task_id: str | None
    type: str | None
    gpus: dict[str, Any] | None = Field(description="the holder trial's latest `gpu` "
                                        "record: time and metrics per host and GPU")


def profiler_router(master: Master, principal: Dependency, user: Dependency,
                    sessions: Sessions) -> APIRouter:
    """The system metrics' routes over ``master``; ``principal`` admits any valid token,
    ``user`` the user's only (``det_sdk.master.routes.common.auth_dependencies``),
    ``sessions`` the UI's users."""
    router = APIRouter()
    ui = UiAuth(master, sessions)

    @router.post("/api/v1/trials/{trial_id}/system-metrics")
    def report_system_metrics(trial_id: Id, report: SystemMetricsReport,
                              p: Principal = Depends(principal)) -> SystemMetricsStored:
        """The profiler's records of the trial (its task's token, or the user's)."""
        own_trial(trial_id, p)
        records = [r.model_dump() for r in report.records]
        stored = sysmet.record(master, trial_id, records)
        return SystemMetricsStored(stored=stored, dropped=len(records) - stored)

    @router.get("/api/v1/trials/{trial_id}/system-metrics")
    def system_metrics(trial_id: Id,
                       group: Annotated[str | None, Query(pattern=_GROUP)] = None,
                       after_id: Annotated[int, Query(ge=0, le=api.MAX_INT, description=(
                           "only records past this id (the previous page's last"))] = 0,
                       limit: Annotated[int, Query(ge=1, le=api.MAX_PAGE_LIMIT)] = 1000,
                       p: Principal = Depends(principal)) -> list[SystemMetricRow]:
        """The trial's system metrics of ``group`` (cpu, memory, disk, network, gpu,
        timings; all if none), oldest first, ``limit`` past ``after_id``."""
        own_trial(trial_id, p)
        return [SystemMetricRow(**r) for r in
                sysmet.read(master, trial_id, group, after_id, limit)]

    @router.get("/ui/api/trials/{trial_id}/system-metrics", include_in_schema=False)
    def ui_system_metrics(trial_id: int, request: Request) -> Response:
        """Per group, the times and one series per host, GPU and metric (the first
        2000 records of each group at most: a chart's width)."""
        ui.user(request)
        return json_response(request, sysmet.chart_series(master, trial_id))

    @router.get("/api/v1/slots")
    def slot_list(p: Principal = Depends(user)) -> dict[str, list[SlotRow]]:
        """The master's slots, who holds each (a trial's or a job's allocation) and,
        for a trial, its GPUs' use as its profiler last reported it (``det slot list``)."""
        rows = sysmet.slots(master)
        hidden = master.roles.hidden_workspaces(p)
        for row in rows if hidden else ():
            # roles (issue 59): a slot held by a trial of a workspace hidden from the
            # caller shows as held, not by what
            task = row["task_id"] or ""
            if task.startswith("trial-") and \
                    master.roles.workspace_of("trial", task[len("trial-"):]) in hidden:
                row.update(allocation_id=None, task_id=None, gpus=None)
        return {"slots": [SlotRow(**s) for s in rows]}

    return router
