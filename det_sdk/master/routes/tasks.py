"""What a task process calls while it runs: its reports (metrics, progress, searcher
operations, checkpoints) and the preemption signal it polls and acknowledges.

A task's token acts on its own trial and allocation only; the user's token may act on
any (tests and tools report by hand). The training metric reports are ``async def``: they
touch in-memory caches and short SQLite statements, and running them on the event loop
saves a thread hand-off per report (the hot path). Whatever takes the lifecycle lock (the
progress and checkpoint reports, a validation report) runs in the thread pool: the lock
may be held while a task is launched (its archive unpacked), and the event loop never
waits for it (issue 46).

>>> # app.include_router(tasks_router(master, principal))
"""

from __future__ import annotations

import asyncio
import contextlib
import functools

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from det_sdk import api
from det_sdk.master.core import Master
from det_sdk.master.routes.common import Dependency, Id, Principal, own_trial

__all__ = ["tasks_router"]


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


def _own_allocation(alloc_id: str, p: Principal, what: str) -> None:
    if p.kind == "task" and (p.allocation or {}).get("id") != alloc_id:
        raise HTTPException(403, f"this task's token cannot {what} another allocation")


def tasks_router(master: Master, principal: Dependency) -> APIRouter:
    """The routes a task calls, over ``master``; ``principal`` admits any valid token
    (``det_sdk.master.routes.common.auth_dependencies``). Registers a listener on
    ``master.preemption_listeners`` that wakes the preemption long-polls."""
    router = APIRouter()
    wakeup = _Wakeup()
    master.preemption_listeners.append(wakeup.fire)

    @router.post("/api/v1/trials/{trial_id}/metrics", status_code=204)
    async def report_metrics(trial_id: Id, report: api.MetricsReport,
                             p: Principal = Depends(principal)) -> Response:
        """Training reports (the hot path) on the event loop; a validation report may
        take the lifecycle lock (a time-metric ASHA rung): in the thread pool, so that
        the loop never waits for the lock (issue 46)."""
        own_trial(trial_id, p)
        call = functools.partial(
            master.report_metrics, trial_id, report.group, report.steps_completed,
            report.epoch, report.metrics, stage=report.stage, searched=report.searched)
        if report.group == "validation":
            await run_in_threadpool(call)
        else:
            call()
        return Response(status_code=204)

    @router.post("/api/v1/trials/{trial_id}/progress", status_code=204)
    def report_progress(trial_id: Id, report: api.ProgressReport,
                        p: Principal = Depends(principal)) -> Response:
        """A plain ``def``: it takes the lifecycle lock."""
        own_trial(trial_id, p)
        master.report_progress(trial_id, report.progress)
        return Response(status_code=204)

    @router.get("/api/v1/trials/{trial_id}/searcher/operation")
    def searcher_operation(trial_id: Id,
                           p: Principal = Depends(principal)) -> api.SearcherOperation | None:
        own_trial(trial_id, p)
        op = master.searcher_operation(trial_id)
        return api.SearcherOperation(**op) if op else None

    @router.post("/api/v1/trials/{trial_id}/searcher/completed_operation")
    def complete_operation(trial_id: Id, done: api.CompletedOperation,
                           p: Principal = Depends(principal)) -> api.SearcherOperation | None:
        own_trial(trial_id, p)
        op = master.complete_operation(trial_id, done.unit, done.length, done.searcher_metric)
        return api.SearcherOperation(**op) if op else None

    @router.post("/api/v1/checkpoints", status_code=204)
    def report_checkpoint(report: api.CheckpointReport,
                          p: Principal = Depends(principal)) -> Response:
        """A plain ``def`` (FastAPI's thread pool): recording waits for the lifecycle
        lock, and retention then deletes the checkpoints it drops (issue 46)."""
        own_trial(report.trial_id, p)
        master.report_checkpoint(report.model_dump())
        return Response(status_code=204)

    @router.get("/api/v1/allocations/{alloc_id}/signals/preemption")
    async def preemption(request: Request, alloc_id: str,
                         timeout_seconds: api.Number = Query(0, ge=0, le=60),
                         p: Principal = Depends(principal)) -> api.PreemptionSignal:
        """Whether the allocation must stop; waits up to `timeout_seconds` for a change.

        An allocation that has ended must stop too (its process may outlive the
        master's record of it). The wait ends early when the caller hangs up.
        """
        _own_allocation(alloc_id, p, "read")
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

    @router.post("/api/v1/allocations/{alloc_id}/signals/ack_preemption")
    def ack_preemption(alloc_id: str, p: Principal = Depends(principal)) -> dict[str, bool]:
        """The task stops because it was asked to (Determined's acknowledgement): its exit
        with 0 is then a stop, not the end of its training."""
        _own_allocation(alloc_id, p, "acknowledge")
        master.acknowledge_preemption(alloc_id)
        return {"acknowledged": True}

    return router
