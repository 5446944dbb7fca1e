"""The master's REST API (FastAPI): JSON over HTTP, bearer tokens, OpenAPI at /docs.

FastAPI because the request and response models are the pydantic models of
``det_sdk.api`` that the SDK and CLI also use: validation, error messages and the
OpenAPI document come from one source. Starlette alone would need all of that by
hand; the cost is FastAPI's import time, paid by the server only.

Every route under ``/api/`` needs ``Authorization: Bearer <token>``: a user token
(from ``det master up``) may do anything; a task token (one per launched process)
works while its process runs, and may only report for its own trial and
allocation, and read checkpoints (batch inference).

A guard in front of the routes checks the token and the body's size before any byte
of the body is read (an anonymous or oversized upload costs the master nothing).
The master's domain errors (``det_sdk.master.errors``) map to statuses here, in one
place; every status and media type the API answers with is in the OpenAPI document.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import sqlite3
import tarfile
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import TypeAdapter
from starlette.exceptions import HTTPException as StarletteHTTPException

from det_sdk import api
from det_sdk.config import (
    ignored_fields,
    ignored_fields_warning,
    launch_warnings,
    parse_experiment_config,
)
from det_sdk.master.archive import MAX_ARCHIVE_BYTES
from det_sdk.master.core import Master
from det_sdk.master.errors import STATUS, RequestError
from det_sdk.master.pages import (
    InvalidCursor,
    checkpoint_page,
    experiment_detail,
    experiment_page,
    metrics_page,
    trial_page,
)
from det_sdk.master.security import SecurityHeaders, Sessions, docs_csp

__all__ = ["create_app"]


log = logging.getLogger("det_sdk.master.app")

Id = Annotated[int, Path(ge=0, le=api.MAX_INT)]
# A page's size and position (det_sdk.master.pages): out-of-range values are refused with
# the parameter's name, like any other invalid field.
Limit = Annotated[int, Query(ge=1, le=api.MAX_PAGE_LIMIT,
                             description="rows per page (at most "
                                         f"{api.MAX_PAGE_LIMIT})")]
Cursor = Annotated[str | None, Query(max_length=200, description="a page's `next_cursor`, "
                                     "unchanged; none: the first page")]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]

# Bodies: a create request carries the model directory (base64) and its config; any
# other request is small. Checked from Content-Length before the body is read, and
# counted as it arrives when there is none (chunked).
SMALL_BODY_BYTES = 1 << 20
UPLOAD_BODY_BYTES = 4 * (MAX_ARCHIVE_BYTES // 3 + 1) + SMALL_BODY_BYTES
_UPLOAD_ROUTES = {("POST", "/api/v1/experiments"), ("POST", "/api/v1/jobs")}

_ERROR = {"model": api.ErrorBody}
_ENDED = ("COMPLETED", "CANCELED", "ERROR")
_FILES_DOC: dict[int | str, dict[str, Any]] = {200: {
    "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    "description": "the files a task created or changed in its working directory, as a "
                   ".tar.gz (det_sdk.master.task_files)"}}
# Documented on every route (FastAPI adds 422, which this API answers as 400).
RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {**_ERROR, "description": "invalid request; `detail` names the field"},
    401: {**_ERROR, "description": "missing or unknown token, or a task token whose "
                                   "process has ended"},
    403: {**_ERROR, "description": "the token may not do this"},
    404: {**_ERROR, "description": "no such experiment, trial, job, checkpoint or allocation"},
    409: {**_ERROR, "description": "not allowed in the current state"},
    413: {**_ERROR, "description": "request body over the limit"},
    507: {**_ERROR, "description": "the master's disk is full"},
}


@dataclass
class Principal:
    kind: str  # "user" | "task"
    allocation: dict[str, Any] | None = None


def authenticate(master: Master, header: str) -> Principal:
    """Who a request's ``Authorization`` header is; HTTPException 401 if nobody.

    A task token works while its allocation runs: once the process has exited, its
    token is refused (S5).
    """
    if not header.lower().startswith("bearer "):
        raise HTTPException(401, "missing bearer token (Authorization: Bearer <token>)")
    token = header[7:].strip()
    if master.store.is_user_token(token):
        return Principal("user")
    alloc = master.store.allocation_by_token(token)
    if alloc is None:
        raise HTTPException(401, "unknown token")
    if alloc["state"] != api.AllocationState.RUNNING.value:
        raise HTTPException(401, f"the token of allocation {alloc['id']} ended with its task")
    return Principal("task", alloc)


async def _send_error(send: Callable[[Message], Awaitable[None]], status: int,
                      detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware in front of ``/api/``: authentication first, then the body's size.

    Pure ASGI (not Starlette's BaseHTTPMiddleware) so that the metric-report hot path
    pays for two header lookups, not for a task per request.
    """

    def __init__(self, app: Any, master: Master) -> None:
        self.app = app
        self.master = master

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)
            return
        auth, length = "", None
        for key, value in scope["headers"]:
            if key == b"authorization":
                auth = value.decode("latin-1")
            elif key == b"content-length":
                length = value
        try:
            principal = authenticate(self.master, auth)
        except HTTPException as err:
            await _send_error(send, err.status_code, err.detail)
            return
        scope.setdefault("state", {})["det_principal"] = principal
        limit = (UPLOAD_BODY_BYTES if (scope["method"], scope["path"].rstrip("/"))
                 in _UPLOAD_ROUTES else SMALL_BODY_BYTES)
        if length is not None:
            if not length.isdigit():
                await _send_error(send, 400, "Content-Length is not a number")
                return
            if int(length) > limit:
                await _send_error(send, 413, f"request body of {int(length)} bytes is over "
                                             f"the limit of {limit} for this route")
                return
            await self.app(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                # FastAPI passes an HTTPException raised while reading the body through
                raise HTTPException(413, f"request body over the limit of {limit} bytes for "
                                         f"this route")
            return message

        await self.app(scope, counted, send)


class _Wakeup:
    """Wakes the preemption long-polls when the master asks trials to stop.

    ``fire`` may be called from any thread; the waiters live on the server's loop.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def event(self) -> asyncio.Event:
        if self._event is None:
            self._loop, self._event = asyncio.get_running_loop(), asyncio.Event()
        return self._event

    def fire(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        fired, self._event = self._event, asyncio.Event()
        if fired is not None:
            fired.set()


def create_app(master: Master) -> FastAPI:
    """The ASGI app serving ``master``."""
    # /docs and /openapi.json are served below, behind the user token (or the UI's session)
    app = FastAPI(title="det_sdk master", version="1", responses=RESPONSES, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.add_middleware(Guard, master=master)
    # the browser-facing headers go around everything Starlette builds, its error
    # handler's 500 included (add_middleware would place them inside that handler)
    build_stack = app.build_middleware_stack
    app.build_middleware_stack = lambda: SecurityHeaders(build_stack())  # type: ignore[method-assign]

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        status = STATUS.get(type(exc), exc.status)
        return JSONResponse(status_code=status, content={"detail": str(exc)})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code != 405:
            return await http_exception_handler(request, exc)
        # Starlette's 405 names the methods of one route only; a path with GET and POST
        # routes must answer `Allow: GET, POST`
        path = request.url.path
        allowed = sorted({m for r in app.router.routes if isinstance(r, APIRoute)
                          and r.path_regex.match(path) for m in r.methods})
        return JSONResponse(status_code=405, content={"detail": exc.detail},
                            headers={"Allow": ", ".join(allowed)})

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # 400 with each field's path and message; the offending input is left out (it may
        # be huge, or a NaN that JSON cannot carry)
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""),
                   "type": e.get("type", "")} for e in exc.errors()]
        return JSONResponse(status_code=400, content={"detail": detail})

    @app.exception_handler(InvalidCursor)
    async def _bad_cursor(request: Request, exc: InvalidCursor) -> JSONResponse:
        # the shape of every other invalid field: the parameter's place and what is wrong
        return JSONResponse(status_code=400, content={"detail": [
            {"loc": ["query", "cursor"], "msg": str(exc), "type": "value_error"}]})

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, exc: RecursionError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": "request nested too deeply"})

    @app.exception_handler(OverflowError)
    async def _overflow(request: Request, exc: OverflowError) -> JSONResponse:
        return JSONResponse(status_code=400,
                            content={"detail": f"a number is out of range: {exc}"})

    @app.exception_handler(sqlite3.OperationalError)
    async def _database(request: Request, exc: sqlite3.OperationalError) -> JSONResponse:
        if "full" in str(exc):
            return JSONResponse(status_code=507, content={
                "detail": f"the master's disk is full ({exc}); free space and retry"})
        raise exc

    @app.exception_handler(OSError)
    async def _os_error(request: Request, exc: OSError) -> JSONResponse:
        if exc.errno == errno.ENOSPC:
            return JSONResponse(status_code=507, content={
                "detail": f"the master's disk is full: {exc}"})
        raise exc

    # The dependencies and the report routes are `async def`: they only touch
    # in-memory caches and short SQLite statements, and running them on the event
    # loop saves a thread hand-off per request (reports are the hot path).
    async def principal(request: Request) -> Principal:
        known = request.scope.get("state", {}).get("det_principal")
        if known is not None:
            return known  # the guard authenticated it already
        return authenticate(master, request.headers.get("authorization", ""))

    async def user(p: Principal = Depends(principal)) -> Principal:
        if p.kind != "user":
            raise HTTPException(403, "this needs a user token, not a task's")
        return p

    def own_trial(trial_id: Id, p: Principal) -> None:
        if p.kind == "task" and (p.allocation or {}).get("trial_id") != trial_id:
            raise HTTPException(403, f"this task's token cannot act on trial {trial_id}")

    # --- health and master ------------------------------------------------------------

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/v1/master")
    def master_info(p: Principal = Depends(principal)) -> dict[str, Any]:
        return {"url": master.url, "slots": master.launcher.slots,
                "free_slots": master.launcher.free_slots()}

    # --- experiments ------------------------------------------------------------------

    @app.post("/api/v1/experiments", status_code=201)
    def create_experiment(req: api.CreateExperimentRequest,
                          p: Principal = Depends(user)) -> api.CreateExperimentResponse:
        exp_id = master.create_experiment(req.config, req.model_definition)
        ignored = ignored_fields(req.config)  # accepted: the config validated above
        warnings = [ignored_fields_warning(ignored)] if ignored else []
        warnings += launch_warnings(parse_experiment_config(req.config))
        for warning in warnings:
            log.warning("experiment %d: %s", exp_id, warning)
        return api.CreateExperimentResponse(id=exp_id, warnings=warnings)

    @app.get("/api/v1/experiments", response_model=api.ExperimentPage)
    def list_experiments(limit: Limit = api.DEFAULT_PAGE_LIMIT, cursor: Cursor = None,
                         p: Principal = Depends(user)) -> Response:
        """The newest experiments first, as summaries; `next_cursor` continues."""
        return _as_json(experiment_page(master, limit, cursor))

    @app.get("/api/v1/experiments/{exp_id}", response_model=api.ExperimentInfo)
    def get_experiment(exp_id: Id, trials_limit: Limit = api.DEFAULT_PAGE_LIMIT,
                       p: Principal = Depends(user)) -> Response:
        """The experiment with its first `trials_limit` trials; `trials_next_cursor`
        continues at `/api/v1/experiments/{exp_id}/trials`."""
        return _as_json(experiment_detail(master, exp_id, trials_limit))

    @app.get("/api/v1/experiments/{exp_id}/trials", response_model=api.TrialPage)
    def list_trials(exp_id: Id, limit: Limit = api.DEFAULT_PAGE_LIMIT, cursor: Cursor = None,
                    p: Principal = Depends(user)) -> Response:
        """The experiment's trials in the order the searcher created them."""
        return _as_json(trial_page(master, exp_id, limit, cursor))

    @app.post("/api/v1/experiments/{exp_id}/pause")
    def pause_experiment(exp_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        master.pause_experiment(exp_id)
        return {"state": master.store.experiment(exp_id)["state"]}  # type: ignore[index]

    @app.post("/api/v1/experiments/{exp_id}/activate")
    def activate_experiment(exp_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        master.activate_experiment(exp_id)
        return {"state": master.store.experiment(exp_id)["state"]}  # type: ignore[index]

    @app.post("/api/v1/experiments/{exp_id}/kill")
    def kill_experiment(exp_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        master.kill_experiment(exp_id)
        return {"state": master.store.experiment(exp_id)["state"]}  # type: ignore[index]

    # --- trials -----------------------------------------------------------------------

    @app.get("/api/v1/trials/{trial_id}")
    def get_trial(trial_id: Id, p: Principal = Depends(principal)) -> api.TrialInfo:
        own_trial(trial_id, p)
        return api.TrialInfo(**master.trial_info(trial_id))

    @app.get("/api/v1/trials/{trial_id}/metrics", response_model=list[api.MetricsRow])
    def trial_metrics(trial_id: Id, group: api.MetricGroup | None = None,
                      after_steps: Annotated[int | None, Query(
                          ge=0, le=api.MAX_INT, description="only reports past this step "
                          "(the previous page's last `steps_completed`)")] = None,
                      limit: Annotated[int, Query(
                          ge=1, le=api.MAX_METRICS_LIMIT, description="about this many rows "
                          "(a page never splits a step); fewer: the last page")]
                      = api.DEFAULT_METRICS_LIMIT,
                      stage: Annotated[str | None, Query(
                          pattern=api.STAGE_PATTERN, description="the series of this stage "
                          "of the script (each context.fit is one); none: the default "
                          "stage's")] = None,
                      p: Principal = Depends(principal)) -> Response:
        """The trial's reports in (steps, group) order, from `after_steps` on."""
        own_trial(trial_id, p)
        return _as_json(_METRICS_ROWS, metrics_page(master, trial_id, group, after_steps, limit,
                                                    stage))

    @app.post("/api/v1/trials/{trial_id}/metrics", status_code=204)
    async def report_metrics(trial_id: Id, report: api.MetricsReport,
                       p: Principal = Depends(principal)) -> Response:
        own_trial(trial_id, p)
        master.report_metrics(trial_id, report.group, report.steps_completed, report.epoch,
                              report.metrics, stage=report.stage, searched=report.searched)
        return Response(status_code=204)

    @app.post("/api/v1/trials/{trial_id}/progress", status_code=204)
    async def report_progress(trial_id: Id, report: api.ProgressReport,
                        p: Principal = Depends(principal)) -> Response:
        own_trial(trial_id, p)
        master.report_progress(trial_id, report.progress)
        return Response(status_code=204)

    @app.get("/api/v1/trials/{trial_id}/searcher/operation")
    def searcher_operation(trial_id: Id,
                           p: Principal = Depends(principal)) -> api.SearcherOperation | None:
        own_trial(trial_id, p)
        op = master.searcher_operation(trial_id)
        return api.SearcherOperation(**op) if op else None

    @app.post("/api/v1/trials/{trial_id}/searcher/completed_operation")
    def complete_operation(trial_id: Id, done: api.CompletedOperation,
                           p: Principal = Depends(principal)) -> api.SearcherOperation | None:
        own_trial(trial_id, p)
        op = master.complete_operation(trial_id, done.unit, done.length, done.searcher_metric)
        return api.SearcherOperation(**op) if op else None

    @app.get("/api/v1/trials/{trial_id}/checkpoints")
    def trial_checkpoints(trial_id: Id, latest: bool = False, best: bool = False,
                          limit: Limit = api.MAX_PAGE_LIMIT,
                          stage: Annotated[str | None, Query(
                              pattern=api.STAGE_PATTERN, description="with latest or best: "
                              "of this stage of the script (each context.fit is one)")] = None,
                          p: Principal = Depends(principal)) -> list[api.CheckpointInfo]:
        """The trial's latest or best checkpoint (of `stage`), or its newest `limit` oldest
        first (`/api/v1/checkpoints?trial_id=` pages through all of them)."""
        master.trial(trial_id)
        if latest or best:
            return [api.CheckpointInfo(**master.trial_checkpoint(trial_id, best=best,
                                                                 stage=stage))]
        return checkpoint_page(master, trial_id, limit, None).checkpoints[::-1]

    @app.get("/api/v1/trials/{trial_id}/logs")
    def trial_logs(trial_id: Id, offset: int = Query(0, ge=0, le=api.MAX_INT),
                   p: Principal = Depends(user)) -> dict[str, Any]:
        master.trial(trial_id)
        return _read_log(master.logs_path("trials", trial_id), offset)

    # --- checkpoints --------------------------------------------------------------------

    @app.post("/api/v1/checkpoints", status_code=204)
    async def report_checkpoint(report: api.CheckpointReport,
                          p: Principal = Depends(principal)) -> Response:
        own_trial(report.trial_id, p)
        master.report_checkpoint(report.model_dump())
        return Response(status_code=204)

    @app.get("/api/v1/checkpoints", response_model=api.CheckpointPage)
    def list_checkpoints(trial_id: Annotated[int | None, Query(ge=0, le=api.MAX_INT)] = None,
                         limit: Limit = api.DEFAULT_PAGE_LIMIT, cursor: Cursor = None,
                         p: Principal = Depends(principal)) -> Response:
        """The newest checkpoints (of one trial) first; `next_cursor` continues."""
        return _as_json(checkpoint_page(master, trial_id, limit, cursor))

    @app.get("/api/v1/checkpoints/{uuid}")
    def get_checkpoint(uuid: str, p: Principal = Depends(principal)) -> api.CheckpointInfo:
        return api.CheckpointInfo(**master.checkpoint_info(uuid))

    @app.get("/api/v1/checkpoints/{uuid}/download", response_class=Response, responses={
        200: {"content": {"application/gzip": {"schema": {"type": "string",
                                                          "format": "binary"}}},
              "description": "the checkpoint's directory as a .tar.gz"},
        410: {**_ERROR, "description": "recorded, but its files are gone"}})
    def download_checkpoint(uuid: str, p: Principal = Depends(principal)) -> Response:
        path = FilePath(master.checkpoint_info(uuid)["path"])
        if not path.is_dir():
            raise HTTPException(410, f"checkpoint {uuid} is recorded but its files are gone")
        return _tar_gz_response(path)

    # --- allocations --------------------------------------------------------------------

    wakeup = _Wakeup()
    master.preemption_listeners.append(wakeup.fire)

    @app.get("/api/v1/allocations/{alloc_id}/signals/preemption")
    async def preemption(request: Request, alloc_id: str,
                         timeout_seconds: api.Number = Query(0, ge=0, le=60),
                         p: Principal = Depends(principal)) -> api.PreemptionSignal:
        """Whether the allocation must stop; waits up to `timeout_seconds` for a change.

        An allocation that has ended must stop too (its process may outlive the
        master's record of it). The wait ends early when the caller hangs up.
        """
        if p.kind == "task" and (p.allocation or {}).get("id") != alloc_id:
            raise HTTPException(403, "this task's token cannot read another allocation")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        while True:
            changed = wakeup.event()  # taken before the check: no wake-up is lost
            if master.should_preempt(alloc_id):
                return api.PreemptionSignal(preempt=True)
            remaining = deadline - loop.time()
            if remaining <= 0 or await request.is_disconnected():
                return api.PreemptionSignal(preempt=False)
            # woken at once by pause/kill; the timeout re-checks now and then anyway
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(remaining, 1.0))

    @app.post("/api/v1/allocations/{alloc_id}/signals/ack_preemption")
    def ack_preemption(alloc_id: str, p: Principal = Depends(principal)) -> dict[str, bool]:
        """The task stops because it was asked to (Determined's acknowledgement): its exit
        with 0 is then a stop, not the end of its training."""
        if p.kind == "task" and (p.allocation or {}).get("id") != alloc_id:
            raise HTTPException(403, "this task's token cannot acknowledge another allocation")
        master.acknowledge_preemption(alloc_id)
        return {"acknowledged": True}

    def _task_files(kind: str, task_id: int, state: str) -> Response:
        path = master.files_path(kind, task_id)
        if not path.is_dir():
            what = kind[:-1]
            raise HTTPException(404, f"{what} {task_id} kept no files: it wrote none into its "
                                     f"working directory" + ("" if state in _ENDED else
                                     f", or has not ended ({state}): they are kept when it "
                                     "ends"))
        return _tar_gz_response(path)

    @app.get("/api/v1/trials/{trial_id}/files", response_class=Response, responses=_FILES_DOC)
    def trial_files(trial_id: Id, p: Principal = Depends(user)) -> Response:
        """The files the trial wrote into its working directory, kept when it ended."""
        return _task_files("trials", trial_id, master.trial(trial_id)["state"])

    # The web UI (pages at /ui/, their data at /ui/api/): det_sdk.master.ui, issue 12.
    from det_sdk.master.ui import ui_router
    from det_sdk.master.ui.routes import COOKIE

    sessions = Sessions(master.store)
    app.include_router(ui_router(master, sessions))
    from det_sdk.master.model_routes import models_router  # the model registry (issue 38)

    app.include_router(models_router(master, user))
    from det_sdk.master.job_routes import jobs_router  # generic jobs (issue 40)

    app.include_router(jobs_router(master, user, principal))

    # --- the API's own description: for the user (token, or signed in to the UI) --------

    def reader(request: Request) -> None:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            if master.store.is_user_token(header[7:].strip()):
                return
        elif sessions.valid(request.cookies.get(COOKIE)):
            return
        raise HTTPException(401, "needs a user token (Authorization: Bearer <token>) or a "
                                 "web UI session")

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_document(request: Request) -> JSONResponse:
        reader(request)
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> Response:
        reader(request)
        page = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} API")
        csp = docs_csp(page.body.decode())
        return Response(page.body, media_type="text/html",
                        headers={"Content-Security-Policy": csp, "Cache-Control": "no-store"})

    return app


_METRICS_ROWS = TypeAdapter(list[api.MetricsRow])


def _as_json(model: Any, value: Any = None) -> Response:
    """A page as JSON, serialized once by pydantic-core (``model`` is a model instance, or
    a TypeAdapter of ``value``). FastAPI's own path for a returned model (validate it
    again, ``jsonable_encoder``, ``json.dumps``) costs about 40 us a row: four times the
    rest of a 100-row page. The route's ``response_model`` still documents the answer.
    """
    body = model.dump_json(value) if isinstance(model, TypeAdapter) else model.model_dump_json()
    return Response(body, media_type="application/json")


def _tar_gz_response(path: FilePath) -> Response:
    """Directory ``path`` as a .tar.gz answer, packed into a spooled temporary file (in
    memory up to 16 MiB, then on disk) and streamed from it in 1 MiB reads: a
    checkpoint of several GB costs the master neither its size in memory (twice, as a
    BytesIO and its value did) nor a read of it at once. Level-1 gzip: weights hardly
    compress, and level 9 took minutes a GB."""
    import tempfile

    from fastapi.responses import StreamingResponse

    from det_sdk.storage import OWNER_FILE

    spool = tempfile.SpooledTemporaryFile(max_size=16 << 20)  # noqa: SIM115 (the stream closes it)
    try:
        with tarfile.open(fileobj=spool, mode="w:gz", compresslevel=1) as tar:
            # the owner file is the master's bookkeeping, not part of the checkpoint
            tar.add(path, arcname=".", filter=lambda info: None
                    if info.name == f"./{OWNER_FILE}" else info)
        size = spool.tell()
        spool.seek(0)
    except BaseException:
        spool.close()
        raise

    def chunks() -> Any:
        with spool:
            while data := spool.read(1 << 20):
                yield data

    return StreamingResponse(chunks(), media_type="application/gzip",
                             headers={"Content-Length": str(size)})


def _read_log(path: Any, offset: int) -> dict[str, Any]:
    """Log text from byte ``offset``; the next offset lets a client follow the log."""
    try:
        with open(path, "rb") as f:
            # past the end: nothing (a seek beyond what the filesystem allows is EINVAL)
            offset = min(offset, os.fstat(f.fileno()).st_size)
            f.seek(offset)
            data = f.read(1 << 20)
    except (FileNotFoundError, NotADirectoryError):
        data = b""  # no log yet (or its place is taken: nothing to show either way)
    return {"text": data.decode("utf-8", errors="replace"), "offset": offset + len(data)}
