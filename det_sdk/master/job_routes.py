"""The generic jobs' routes (``det job ...``, issue 40): create, list, describe, logs,
kept files, pause / activate / kill, and the progress a job's chief reports.

Each route is a thin shell over a ``Master`` method (det_sdk.master.core); the states
are the lifecycle's (det_sdk.master.lifecycle ``JOB_TRANSITIONS``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Response

from det_sdk import api

# the app's shared pieces (app.py includes this module from create_app, not at import)
from det_sdk.master.app import Cursor, Id, Limit, _as_json, _read_log, _tar_gz_response
from det_sdk.master.pages import job_page

__all__ = ["jobs_router"]

_FILES_DOC: dict[int | str, dict[str, Any]] = {200: {
    "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    "description": "the files the job created or changed in its working directory, as a "
                   ".tar.gz (det_sdk.master.task_files)"}}


def jobs_router(master: Any, user: Any, principal: Any) -> APIRouter:
    """``/api/v1/jobs`` for the user's token, and ``/api/v1/allocations/{id}/progress``
    for the job's own task token (``principal``: the dependency that admits either).

    >>> # app.include_router(jobs_router(master, user, principal))
    """
    router = APIRouter()

    @router.post("/api/v1/jobs", status_code=201)
    def create_job(req: api.CreateJobRequest, p: Any = Depends(user)) -> dict[str, int]:
        return {"id": master.create_job(req.config, req.model_definition)}

    @router.get("/api/v1/jobs", response_model=api.JobPage)
    def list_jobs(limit: Limit = api.DEFAULT_PAGE_LIMIT, cursor: Cursor = None,
                  p: Any = Depends(user)) -> Response:
        """The newest jobs first; `next_cursor` continues."""
        return _as_json(job_page(master, limit, cursor))

    @router.get("/api/v1/jobs/{job_id}")
    def get_job(job_id: Id, p: Any = Depends(user)) -> api.JobInfo:
        """The job, its restarts and progress (rows done of the total, rows per second,
        seconds left) and where its output goes."""
        return api.JobInfo(**master.job_info(job_id))

    @router.get("/api/v1/jobs/{job_id}/logs")
    def job_logs(job_id: Id, offset: int = Query(0, ge=0, le=api.MAX_INT),
                 p: Any = Depends(user)) -> dict[str, Any]:
        master.job(job_id)
        return _read_log(master.logs_path("jobs", job_id), offset)

    @router.get("/api/v1/jobs/{job_id}/files", response_class=Response, responses=_FILES_DOC)
    def job_files(job_id: Id, p: Any = Depends(user)) -> Response:
        """The files the job wrote into its working directory, kept when it ended."""
        return _tar_gz_response(master.job_files_dir(job_id))

    @router.post("/api/v1/jobs/{job_id}/pause")
    def pause_job(job_id: Id, p: Any = Depends(user)) -> dict[str, str]:
        """Its process stops at its next progress checkpoint; PAUSED once it has."""
        return {"state": master.pause_job(job_id)}

    @router.post("/api/v1/jobs/{job_id}/activate")
    def activate_job(job_id: Id, p: Any = Depends(user)) -> dict[str, str]:
        """A paused job runs again, from its progress."""
        return {"state": master.activate_job(job_id)}

    @router.post("/api/v1/jobs/{job_id}/kill")
    def kill_job(job_id: Id, p: Any = Depends(user)) -> dict[str, str]:
        """Its process is stopped; CANCELED once it has exited."""
        return {"state": master.kill_job(job_id)}

    @router.post("/api/v1/allocations/{alloc_id}/progress", status_code=204)
    async def report_job_progress(alloc_id: str, report: api.JobProgressReport,
                                  p: Any = Depends(principal)) -> Response:
        """A job's chief: rows done of the total (null: unknown) and where the output is."""
        if p.kind == "task" and (p.allocation or {}).get("id") != alloc_id:
            raise HTTPException(403, "this task's token cannot report for another allocation")
        master.report_job_progress(alloc_id, report.rows_done, report.rows_total,
                                   report.output)
        return Response(status_code=204)

    return router
