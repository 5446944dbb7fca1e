"""The master's REST API (FastAPI): JSON over HTTP, bearer tokens, OpenAPI at /docs.

FastAPI because the request and response models are the pydantic models of
``det_sdk.api`` that the SDK and CLI also use: validation, error messages and the
OpenAPI document come from one source. Starlette alone would need all of that by
hand; the cost is FastAPI's import time, paid by the server only.

Every route under ``/api/`` needs ``Authorization: Bearer <token>``: a user token
(from ``det master up``) may do anything; a task token (one per launched process)
works while its process runs, and may only report for its own trial and
allocation, and read checkpoints (batch inference).

``create_app`` only composes: the guard in front of ``/api/`` (the token and the
body's size, before any byte of the body is read: ``routes.guard``), the browser-facing
security headers, the error-to-status mapping (``routes.errors``: the master's domain
errors map to statuses there, in one place) and one router per resource
(``det_sdk.master.routes``). Every status and media type the API answers with is in the
OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Depends, FastAPI, Query
from fastapi.responses import Response

from det_sdk import api
from det_sdk.master.core import Master
from det_sdk.master.pages import job_page
from det_sdk.master.routes.checkpoints import checkpoints_router
from det_sdk.master.routes.cluster import cluster_router
from det_sdk.master.routes.common import (
    FILES_DOC,
    RESPONSES,
    Cursor,
    Id,
    Limit,
    Principal,
    as_json,
    auth_dependencies,
    read_log,
    task_files,
)
from det_sdk.master.routes.docs import docs_router
from det_sdk.master.routes.errors import add_error_handlers
from det_sdk.master.routes.experiments import experiments_router
from det_sdk.master.routes.guard import Guard
from det_sdk.master.routes.models import models_router
from det_sdk.master.routes.tasks import tasks_router
from det_sdk.master.routes.trials import trials_router
from det_sdk.master.routes.ui import ui_router
from det_sdk.master.routes.ui_data import ui_data_router
from det_sdk.master.security import SecurityHeaders, Sessions

__all__ = ["create_app"]

_as_json, _read_log, _FILES_DOC = as_json, read_log, FILES_DOC  # the jobs routes' names


def create_app(master: Master) -> FastAPI:
    """The ASGI app serving ``master``."""
    # /docs and /openapi.json are served by docs_router, behind the user token (or the UI's
    # session)
    app = FastAPI(title="det_sdk master", version="1", responses=RESPONSES, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.add_middleware(Guard, master=master)
    # the browser-facing headers go around everything Starlette builds, its error
    # handler's 500 included (add_middleware would place them inside that handler)
    build_stack = app.build_middleware_stack
    app.build_middleware_stack = lambda: SecurityHeaders(build_stack())  # type: ignore[method-assign]
    add_error_handlers(app)

    principal, user = auth_dependencies(master)
    sessions = Sessions(master.store)
    app.include_router(cluster_router(master, principal))
    app.include_router(experiments_router(master, user))
    app.include_router(trials_router(master, principal, user))
    app.include_router(checkpoints_router(master, principal))
    app.include_router(tasks_router(master, principal))
    _jobs_routes(app, master, user)
    app.include_router(models_router(master, user))  # the model registry (issue 38)
    # the web UI (pages at /ui/, their data at /ui/api/): det_sdk.master.ui, issue 12
    app.include_router(ui_router(master, sessions))
    app.include_router(ui_data_router(master, sessions))
    app.include_router(docs_router(app, master, sessions))
    return app


def _jobs_routes(app: FastAPI, master: Master, user: Any) -> None:
    """``/api/v1/jobs``: the user's jobs (commands run once, no searcher)."""

    def _task_files(kind: str, task_id: int, state: str) -> Response:
        return task_files(master, kind, task_id, state)

    # --- jobs -----------------------------------------------------------------------------

    @app.post("/api/v1/jobs", status_code=201)
    def create_job(req: api.CreateJobRequest, p: Principal = Depends(user)) -> dict[str, int]:
        return {"id": master.create_job(req.config, req.model_definition)}

    @app.get("/api/v1/jobs", response_model=api.JobPage)
    def list_jobs(limit: Limit = api.DEFAULT_PAGE_LIMIT, cursor: Cursor = None,
                  p: Principal = Depends(user)) -> Response:
        """The newest jobs first; `next_cursor` continues."""
        return _as_json(job_page(master, limit, cursor))

    @app.get("/api/v1/jobs/{job_id}")
    def get_job(job_id: Id, p: Principal = Depends(user)) -> api.JobInfo:
        return _job_info(master.job(job_id))

    @app.get("/api/v1/jobs/{job_id}/logs")
    def job_logs(job_id: Id, offset: int = Query(0, ge=0, le=api.MAX_INT),
                 p: Principal = Depends(user)) -> dict[str, Any]:
        master.job(job_id)
        return _read_log(master.logs_path("jobs", job_id), offset)

    @app.get("/api/v1/jobs/{job_id}/files", response_class=Response, responses=_FILES_DOC)
    def job_files(job_id: Id, p: Principal = Depends(user)) -> Response:
        """The files the job wrote into its working directory, kept when it ended."""
        return _task_files("jobs", job_id, master.job(job_id)["state"])


def _job_info(j: Mapping[str, Any]) -> api.JobInfo:
    return api.JobInfo(id=j["id"], name=j["name"], state=j["state"], config=j["config"],
                       created=j["created"], exit_code=j["exit_code"])
