"""``/api/v1/jobs``: the generic jobs (``det job ...``, issue 40): create, list, describe,
logs, kept files, pause / activate / kill; and what a job's chief reports with the job's
task token: its progress (``POST /api/v1/allocations/{alloc_id}/progress``) and its
metrics (``POST /api/v1/allocations/{alloc_id}/metrics``).

Each route is a thin shell over a ``Master`` method; the states are the lifecycle's
(``det_sdk.master.lifecycle.JOB_TRANSITIONS``).

>>> # app.include_router(jobs_router(master, principal, user))
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

from det_sdk import api
from det_sdk.master.core import Master
from det_sdk.master.pages import job_page
from det_sdk.master.routes.common import (
    FILES_DOC,
    Cursor,
    Dependency,
    Id,
    Limit,
    Principal,
    as_json,
    read_log,
    task_files,
)

__all__ = ["jobs_router"]


def jobs_router(master: Master, principal: Dependency, user: Dependency) -> APIRouter:
    """The jobs' routes over ``master``: the user's, and the progress report that only
    the job's own task token (or the user) may send."""
    router = APIRouter()

    @router.post("/api/v1/jobs", status_code=201)
    def create_job(req: api.CreateJobRequest, p: Principal = Depends(user)) -> dict[str, int]:
        return {"id": master.create_job(req.config, req.model_definition, p.user_id)}

    @router.get("/api/v1/jobs", response_model=api.JobPage)
    def list_jobs(limit: Limit = api.DEFAULT_PAGE_LIMIT, cursor: Cursor = None,
                  p: Principal = Depends(user)) -> Response:
        """The newest jobs first, with their progress; `next_cursor` continues."""
        return as_json(job_page(master, limit, cursor))

    @router.get("/api/v1/jobs/{job_id}")
    def get_job(job_id: Id, p: Principal = Depends(user)) -> api.JobInfo:
        """The job, its restarts and progress (rows done of the total, rows per second,
        seconds left) and where its output is."""
        return api.JobInfo(**master.job_info(job_id))

    @router.get("/api/v1/jobs/{job_id}/logs")
    def job_logs(job_id: Id, offset: int = Query(0, ge=0, le=api.MAX_INT),
                 p: Principal = Depends(user)) -> dict[str, Any]:
        master.job(job_id)
        return read_log(master.logs_path("jobs", job_id), offset)

    @router.get("/api/v1/jobs/{job_id}/files", response_class=Response, responses=FILES_DOC)
    def job_files(job_id: Id, p: Principal = Depends(user)) -> Response:
        """The files the job wrote into its working directory, kept when it ended."""
        return task_files(master, "jobs", job_id, master.job(job_id)["state"])

    @router.post("/api/v1/jobs/{job_id}/pause")
    def pause_job(job_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        """Its process stops at its next progress point; PAUSED once it has."""
        return {"state": master.pause_job(job_id)}

    @router.post("/api/v1/jobs/{job_id}/activate")
    def activate_job(job_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        """A paused job runs again, from its progress."""
        return {"state": master.activate_job(job_id)}

    @router.post("/api/v1/jobs/{job_id}/kill")
    def kill_job(job_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        """Its process is stopped; CANCELED once it has exited."""
        return {"state": master.kill_job(job_id)}

    @router.post("/api/v1/allocations/{alloc_id}/progress", status_code=204)
    async def report_job_progress(alloc_id: str, report: api.JobProgressReport,
                                  p: Principal = Depends(principal)) -> Response:
        """A job's chief: rows done of the total (null: unknown) and where the output is."""
        if p.kind == "task" and (p.allocation or {}).get("id") != alloc_id:
            raise HTTPException(403, "this task's token cannot report for another allocation")
        master.report_job_progress(alloc_id, report.rows_done, report.rows_total,
                                   report.output)
        return Response(status_code=204)

    @router.post("/api/v1/allocations/{alloc_id}/metrics", status_code=204)
    async def report_job_metrics(alloc_id: str, report: api.MetricsReport,
                                 p: Principal = Depends(principal)) -> Response:
        """A job's chief reports metrics (`report_metrics` in a job script), validated as
        a trial's; kept per job, one report per (group, step). `searched` means nothing
        for a job (no searcher)."""
        if p.kind == "task" and (p.allocation or {}).get("id") != alloc_id:
            raise HTTPException(403, "this task's token cannot report for another allocation")
        master.report_job_metrics(alloc_id, report.group, report.steps_completed,
                                  report.epoch, report.metrics, stage=report.stage)
        return Response(status_code=204)

    return router
