"""``/api/v1/trials/{trial_id}``: a trial, its metrics, checkpoints, logs and files.

A task's token may read its own trial (its metrics and checkpoints: a script resuming
or comparing); logs and files are the user's. What a task reports is in
``det_sdk.master.routes.tasks``.

>>> # app.include_router(trials_router(master, principal, user))
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response
from pydantic import TypeAdapter

from det_sdk import api
from det_sdk.master.core import Master
from det_sdk.master.pages import checkpoint_page, metrics_page
from det_sdk.master.routes.common import (
    FILES_DOC,
    Dependency,
    Id,
    Limit,
    Principal,
    as_json,
    own_trial,
    read_log,
    task_files,
)

__all__ = ["trials_router"]

_METRICS_ROWS = TypeAdapter(list[api.MetricsRow])


def trials_router(master: Master, principal: Dependency, user: Dependency) -> APIRouter:
    """The trials' routes over ``master``; ``principal`` admits any valid token, ``user``
    the user's only (``det_sdk.master.routes.common.auth_dependencies``)."""
    router = APIRouter(prefix="/api/v1/trials/{trial_id}")

    @router.get("")
    def get_trial(trial_id: Id, p: Principal = Depends(principal)) -> api.TrialInfo:
        own_trial(trial_id, p)
        return api.TrialInfo(**master.trial_info(trial_id))

    @router.get("/metrics", response_model=list[api.MetricsRow])
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
        return as_json(_METRICS_ROWS, metrics_page(master, trial_id, group, after_steps, limit,
                                                   stage))

    @router.get("/checkpoints")
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

    @router.get("/logs")
    def trial_logs(trial_id: Id, offset: int = Query(0, ge=0, le=api.MAX_INT),
                   p: Principal = Depends(user)) -> dict[str, Any]:
        master.trial(trial_id)
        return read_log(master.logs_path("trials", trial_id), offset)

    @router.get("/files", response_class=Response, responses=FILES_DOC)
    def trial_files(trial_id: Id, p: Principal = Depends(user)) -> Response:
        """The files the trial wrote into its working directory, kept when it ended."""
        return task_files(master, "trials", trial_id, master.trial(trial_id)["state"])

    return router
