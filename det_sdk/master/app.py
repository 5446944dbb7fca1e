"""The master's REST API (FastAPI): JSON over HTTP, bearer tokens, OpenAPI at /docs.

FastAPI because the request and response models are the pydantic models of
``det_sdk.api`` that the SDK and CLI also use: validation, error messages and the
OpenAPI document come from one source. Starlette alone would need all of that by
hand; the cost is FastAPI's import time, paid by the server only.

Every route needs ``Authorization: Bearer <token>``: a user token (from ``det
master up``) may do anything; a task token (one per launched process) may only
report for its own trial and allocation, and read checkpoints (batch inference).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response

from det_sdk import api
from det_sdk.master.core import Master, RequestError

__all__ = ["create_app"]


@dataclass
class Principal:
    kind: str  # "user" | "task"
    allocation: dict[str, Any] | None = None


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
    app = FastAPI(title="det_sdk master", version="1")

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content={"detail": str(exc)})

    # The dependencies and the report routes are `async def`: they only touch
    # in-memory caches and short SQLite statements, and running them on the event
    # loop saves a thread hand-off per request (reports are the hot path).
    async def principal(request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        if not header.lower().startswith("bearer "):
            raise HTTPException(401, "missing bearer token (Authorization: Bearer <token>)")
        token = header[7:].strip()
        if master.store.is_user_token(token):
            return Principal("user")
        alloc = master.store.allocation_by_token(token)
        if alloc is not None:
            return Principal("task", alloc)
        raise HTTPException(401, "unknown token")

    async def user(p: Principal = Depends(principal)) -> Principal:
        if p.kind != "user":
            raise HTTPException(403, "this needs a user token, not a task's")
        return p

    def own_trial(trial_id: int, p: Principal) -> None:
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
                          p: Principal = Depends(user)) -> dict[str, int]:
        return {"id": master.create_experiment(req.config, req.model_definition)}

    @app.get("/api/v1/experiments")
    def list_experiments(p: Principal = Depends(user)) -> list[api.ExperimentInfo]:
        return [api.ExperimentInfo(**master.experiment_info(e["id"]))
                for e in master.store.experiments()]

    @app.get("/api/v1/experiments/{exp_id}")
    def get_experiment(exp_id: int, p: Principal = Depends(user)) -> api.ExperimentInfo:
        return api.ExperimentInfo(**master.experiment_info(exp_id))

    @app.post("/api/v1/experiments/{exp_id}/pause")
    def pause_experiment(exp_id: int, p: Principal = Depends(user)) -> dict[str, str]:
        master.pause_experiment(exp_id)
        return {"state": master.store.experiment(exp_id)["state"]}  # type: ignore[index]

    @app.post("/api/v1/experiments/{exp_id}/activate")
    def activate_experiment(exp_id: int, p: Principal = Depends(user)) -> dict[str, str]:
        master.activate_experiment(exp_id)
        return {"state": master.store.experiment(exp_id)["state"]}  # type: ignore[index]

    @app.post("/api/v1/experiments/{exp_id}/kill")
    def kill_experiment(exp_id: int, p: Principal = Depends(user)) -> dict[str, str]:
        master.kill_experiment(exp_id)
        return {"state": master.store.experiment(exp_id)["state"]}  # type: ignore[index]

    # --- trials -----------------------------------------------------------------------

    @app.get("/api/v1/trials/{trial_id}")
    def get_trial(trial_id: int, p: Principal = Depends(principal)) -> api.TrialInfo:
        own_trial(trial_id, p)
        return api.TrialInfo(**master.trial_info(trial_id))

    @app.get("/api/v1/trials/{trial_id}/metrics")
    def trial_metrics(trial_id: int, group: str | None = None,
                      p: Principal = Depends(principal)) -> list[dict[str, Any]]:
        own_trial(trial_id, p)
        master.trial(trial_id)
        return [{"group": m["grp"], "steps_completed": m["steps"], "epoch": m["epoch"],
                 "metrics": m["metrics"]} for m in master.store.metrics(trial_id, group)]

    @app.post("/api/v1/trials/{trial_id}/metrics", status_code=204)
    async def report_metrics(trial_id: int, report: api.MetricsReport,
                       p: Principal = Depends(principal)) -> Response:
        own_trial(trial_id, p)
        master.report_metrics(trial_id, report.group, report.steps_completed, report.epoch,
                              report.metrics)
        return Response(status_code=204)

    @app.post("/api/v1/trials/{trial_id}/progress", status_code=204)
    async def report_progress(trial_id: int, report: api.ProgressReport,
                        p: Principal = Depends(principal)) -> Response:
        own_trial(trial_id, p)
        master.report_progress(trial_id, report.progress)
        return Response(status_code=204)

    @app.get("/api/v1/trials/{trial_id}/searcher/operation")
    def searcher_operation(trial_id: int,
                           p: Principal = Depends(principal)) -> api.SearcherOperation | None:
        own_trial(trial_id, p)
        op = master.searcher_operation(trial_id)
        return api.SearcherOperation(**op) if op else None

    @app.post("/api/v1/trials/{trial_id}/searcher/completed_operation")
    def complete_operation(trial_id: int, done: api.CompletedOperation,
                           p: Principal = Depends(principal)) -> api.SearcherOperation | None:
        own_trial(trial_id, p)
        op = master.complete_operation(trial_id, done.unit, done.length, done.searcher_metric)
        return api.SearcherOperation(**op) if op else None

    @app.get("/api/v1/trials/{trial_id}/checkpoints")
    def trial_checkpoints(trial_id: int, latest: bool = False, best: bool = False,
                          p: Principal = Depends(principal)) -> list[api.CheckpointInfo]:
        master.trial(trial_id)
        if latest or best:
            return [api.CheckpointInfo(**master.trial_checkpoint(trial_id, best=best))]
        return [api.CheckpointInfo(**c) for c in master.checkpoints(trial_id)]

    @app.get("/api/v1/trials/{trial_id}/logs")
    def trial_logs(trial_id: int, offset: int = Query(0, ge=0),
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

    @app.get("/api/v1/checkpoints")
    def list_checkpoints(trial_id: int | None = None,
                         p: Principal = Depends(principal)) -> list[api.CheckpointInfo]:
        return [api.CheckpointInfo(**c) for c in master.checkpoints(trial_id)]

    @app.get("/api/v1/checkpoints/{uuid}")
    def get_checkpoint(uuid: str, p: Principal = Depends(principal)) -> api.CheckpointInfo:
        return api.CheckpointInfo(**master.checkpoint_info(uuid))

    @app.get("/api/v1/checkpoints/{uuid}/download")
    def download_checkpoint(uuid: str, p: Principal = Depends(principal)) -> Response:
        path = Path(master.checkpoint_info(uuid)["path"])
        if not path.is_dir():
            raise HTTPException(410, f"checkpoint {uuid} is recorded but its files are gone")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(path, arcname=".")
        return Response(buf.getvalue(), media_type="application/gzip")

    # --- allocations --------------------------------------------------------------------

    wakeup = _Wakeup()
    master.preemption_listeners.append(wakeup.fire)

    @app.get("/api/v1/allocations/{alloc_id}/signals/preemption")
    async def preemption(alloc_id: str, timeout_seconds: float = Query(0, ge=0, le=60),
                         p: Principal = Depends(principal)) -> api.PreemptionSignal:
        if p.kind == "task" and (p.allocation or {}).get("id") != alloc_id:
            raise HTTPException(403, "this task's token cannot read another allocation")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        while True:
            changed = wakeup.event()  # taken before the check: no wake-up is lost
            if master.should_preempt(alloc_id):
                return api.PreemptionSignal(preempt=True)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return api.PreemptionSignal(preempt=False)
            # woken at once by pause/kill; the timeout re-checks now and then anyway
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(remaining, 1.0))

    # --- jobs -----------------------------------------------------------------------------

    @app.post("/api/v1/jobs", status_code=201)
    def create_job(req: api.CreateJobRequest, p: Principal = Depends(user)) -> dict[str, int]:
        return {"id": master.create_job(req.config, req.model_definition)}

    @app.get("/api/v1/jobs")
    def list_jobs(p: Principal = Depends(user)) -> list[api.JobInfo]:
        return [_job_info(j) for j in master.store.jobs()]

    @app.get("/api/v1/jobs/{job_id}")
    def get_job(job_id: int, p: Principal = Depends(user)) -> api.JobInfo:
        return _job_info(master.job(job_id))

    @app.get("/api/v1/jobs/{job_id}/logs")
    def job_logs(job_id: int, offset: int = Query(0, ge=0),
                 p: Principal = Depends(user)) -> dict[str, Any]:
        master.job(job_id)
        return _read_log(master.logs_path("jobs", job_id), offset)

    # The web UI (pages at /ui/, their data at /ui/api/): det_sdk.master.ui, issue 12.
    from det_sdk.master.ui import ui_router
    app.include_router(ui_router(master))

    return app


def _job_info(j: dict[str, Any]) -> api.JobInfo:
    return api.JobInfo(id=j["id"], name=j["name"], state=j["state"], config=j["config"],
                       created=j["created"], exit_code=j["exit_code"])


def _read_log(path: Any, offset: int) -> dict[str, Any]:
    """Log text from byte ``offset``; the next offset lets a client follow the log."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(1 << 20)
    except FileNotFoundError:
        data = b""
    return {"text": data.decode("utf-8", errors="replace"), "offset": offset + len(data)}
