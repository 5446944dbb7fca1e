"""The web UI pages' data (``/ui/api/``): experiments, curves, trials and their metrics,
logs, checkpoints, jobs, models, and the ``det tensorboard`` servers, as JSON for a
signed-in user (``det_sdk.master.ui.web.UiAuth``). The queries are
``det_sdk.master.ui.views``; outside ``/api/``, so the API's guard does not apply.

>>> # app.include_router(ui_data_router(master, sessions))
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response

from det_sdk.api import MAX_PAGE_LIMIT, STAGE_PATTERN
from det_sdk.master.core import Master
from det_sdk.master.routes.common import checkpoint_download
from det_sdk.master.security import Sessions
from det_sdk.master.ui.views import (
    CURVE_POINTS,
    CURVE_TRIALS,
    MAX_CURVE_POINTS,
    MAX_CURVE_TRIALS,
    PAGE,
    Views,
    read_log,
)
from det_sdk.master.ui.web import UiAuth, clean, http_url, json_response, small_body
from det_sdk.storage import pid_alive

__all__ = ["ui_data_router"]

MAX_POINTS_DEFAULT = 2000


# A log page opens at its last 256 KiB (a negative offset counts from the end).
LOG_TAIL_OFFSET = -262144

def ui_data_router(master: Master, sessions: Sessions) -> APIRouter:
    """The pages' data over ``master``, for a user signed in with one of ``sessions`` (or
    holding the user token)."""
    router = APIRouter(prefix="/ui/api", include_in_schema=False)
    auth = UiAuth(master, sessions)
    views = Views(master)
    # `det tensorboard` processes that told the master where they serve, by experiment
    tensorboards: list[dict[str, Any]] = []

    def live_tensorboards() -> list[dict[str, Any]]:
        # `det tensorboard run` runs on the master's machine (the embedded master's CLI
        # shares its files): a dead pid means that TensorBoard is gone. Then the ones the
        # master runs (`det tensorboard start`) that serve.
        tensorboards[:] = [tb for tb in tensorboards if pid_alive(tb["pid"])]
        started = [{"url": tb["url"], "id": tb["id"], "experiments": tb["experiment_ids"]}
                   for tb in master.tensorboards.list() if tb["state"] == "RUNNING"]
        return list(tensorboards) + started

    # --- experiments ------------------------------------------------------------------------

    @router.get("/experiments")
    def experiments(request: Request, limit: int = Query(PAGE, ge=1, le=MAX_PAGE_LIMIT),
                    cursor: str | None = Query(None, max_length=200)) -> Response:
        """The newest experiments first, ``limit`` at a time (``next_cursor`` continues)."""
        auth.user(request)
        # roles (issue 59): the caller's, found by the permission check
        who = request.scope.get("state", {}).get("det_ui_principal")
        projects = master.roles.visible_projects(who, None)
        return json_response(request, clean(views.experiments(limit, cursor, projects)))

    @router.get("/experiments/{exp_id}")
    def experiment(exp_id: int, request: Request) -> Response:
        auth.user(request)
        info = views.experiment(exp_id)
        info["tensorboards"] = [tb for tb in live_tensorboards() if exp_id in tb["experiments"]]
        return json_response(request, clean(info))

    @router.get("/experiments/{exp_id}/curves")
    def curves(exp_id: int, request: Request,
               max_trials: int = Query(CURVE_TRIALS, ge=1, le=MAX_CURVE_TRIALS),
               max_points: int = Query(CURVE_POINTS, ge=0, le=MAX_CURVE_POINTS)) -> Response:
        """The best ``max_trials`` trials' searcher metric, ``max_points`` validations each
        (0: all), and ``total_trials``: a bounded answer however many trials there are."""
        auth.user(request)
        return json_response(request, clean(views.curves(exp_id, max_trials, max_points)))

    @router.post("/experiments/{exp_id}/{verb}")
    def experiment_action(exp_id: int, verb: str, request: Request) -> dict[str, str]:
        auth.action(request)
        do = {"pause": master.pause_experiment, "activate": master.activate_experiment,
              "kill": master.kill_experiment}.get(verb)
        if do is None:
            raise HTTPException(404, f"no action {verb!r}: pause, activate or kill")
        do(exp_id)
        return {"state": master.experiment_state(exp_id)}

    # --- trials and checkpoints ---------------------------------------------------------------

    @router.get("/trials/{trial_id}")
    def trial(trial_id: int, request: Request) -> Response:
        auth.user(request)
        return json_response(request, clean(views.trial(trial_id)))

    @router.get("/trials/{trial_id}/metrics")
    def trial_metrics(trial_id: int, request: Request,
                      max_points: int = Query(MAX_POINTS_DEFAULT, ge=0),
                      group: str | None = None, x_min: float | None = None,
                      x_max: float | None = None,
                      stage: str | None = Query(None, pattern=STAGE_PATTERN)) -> Response:
        """``max_points=0``: the full series; ``x_min``/``x_max`` (batches): a zoomed window;
        ``stage``: that stage's series (none: the default stage's)."""
        auth.user(request)
        x_range = (x_min if x_min is not None else -math.inf,
                   x_max if x_max is not None else math.inf)
        data = views.metrics(trial_id, max_points, group,
                             None if x_min is None and x_max is None else x_range, stage)
        return json_response(request, data)

    @router.get("/trials/{trial_id}/logs")
    def trial_logs(trial_id: int, request: Request, offset: int = LOG_TAIL_OFFSET) -> Response:
        auth.user(request)
        master.trial(trial_id)
        return json_response(request, read_log(master.logs_path("trials", trial_id), offset))

    @router.get("/checkpoints/{uuid}/download")
    def download_checkpoint(uuid: str, request: Request) -> Response:
        auth.user(request)
        return checkpoint_download(master, uuid)  # as the API's: verified, streamed

    # --- jobs and models ----------------------------------------------------------------------

    @router.get("/jobs")
    def jobs(request: Request, limit: int = Query(PAGE, ge=1, le=MAX_PAGE_LIMIT),
             cursor: str | None = Query(None, max_length=200)) -> Response:
        auth.user(request)
        return json_response(request, views.jobs(limit, cursor))

    @router.get("/models")
    def models(request: Request) -> Response:
        auth.user(request)
        return json_response(request, views.models())

    @router.get("/jobs/{job_id}")
    def job(job_id: int, request: Request) -> Response:
        auth.user(request)
        return json_response(request, clean(views.job(job_id)))

    @router.get("/jobs/{job_id}/metrics")
    def job_metrics(job_id: int, request: Request,
                    max_points: int = Query(MAX_POINTS_DEFAULT, ge=0)) -> Response:
        """The job's metric series (``report_metrics`` in a job), as a trial's."""
        auth.user(request)
        return json_response(request, views.job_metrics(job_id, max_points))

    @router.post("/jobs/{job_id}/{verb}")
    def job_action(job_id: int, verb: str, request: Request) -> dict[str, str]:
        """Pause, activate or kill: the master's operations `det job` calls, behind the
        UI's action header (as the experiments')."""
        auth.action(request)
        do = {"pause": master.pause_job, "activate": master.activate_job,
              "kill": master.kill_job}.get(verb)
        if do is None:
            raise HTTPException(404, f"no action {verb!r}: pause, activate or kill")
        return {"state": do(job_id)}

    @router.get("/jobs/{job_id}/logs")
    def job_logs(job_id: int, request: Request, offset: int = LOG_TAIL_OFFSET) -> Response:
        auth.user(request)
        master.job(job_id)
        return json_response(request, read_log(master.logs_path("jobs", job_id), offset))

    # --- TensorBoard (det tensorboard) ------------------------------------------------------

    @router.get("/tensorboard-dirs")
    def tensorboard_dirs(request: Request, experiment_ids: str = Query(...)) -> Response:
        auth.user(request)
        try:
            ids = [int(x) for x in experiment_ids.split(",") if x.strip()]
        except ValueError:
            raise HTTPException(400, "experiment_ids: comma-separated integers") from None
        master.roles.check_visible(request.scope.get("state", {}).get(
            "det_ui_principal"), "experiment", ids)  # roles (issue 59)
        return json_response(request, views.tensorboard_dirs(ids))

    @router.post("/tensorboards", status_code=201)
    async def register_tensorboard(request: Request) -> dict[str, bool]:
        auth.action(request)
        try:
            body = json.loads(await small_body(request))
            entry = {"url": http_url(body["url"], "url"), "pid": int(body["pid"]),
                     "experiments": [int(e) for e in body.get("experiments", [])]}
        except (KeyError, TypeError, ValueError):
            raise HTTPException(400, "body: {url, pid, experiments}") from None
        tensorboards.append(entry)
        return {"ok": True}

    @router.get("/tensorboards")
    def list_tensorboards(request: Request) -> Response:
        auth.user(request)
        return json_response(request, [{k: v for k, v in tb.items() if k != "pid"}
                                       for tb in live_tensorboards()])

    return router
