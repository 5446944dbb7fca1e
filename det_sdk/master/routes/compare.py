"""Experiments side by side (``det_sdk.master.compare``): ``GET /api/v1/compare`` for the
user's token (the Python client's ``compare``), ``GET /ui/api/compare`` for the web UI's
signed-in user (``det_sdk.master.ui.web.UiAuth``, as the UI's other data). A task's
token may call neither: a comparison reads every experiment's trials.

>>> # app.include_router(compare_router(master, user, sessions))
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import Field

from det_sdk import api
from det_sdk.master.compare import DEFAULT_POINTS, MAX_POINTS, MAX_TRIALS, MIN_POINTS, Comparer
from det_sdk.master.core import Master
from det_sdk.master.routes.common import Dependency, Principal
from det_sdk.master.security import Sessions
from det_sdk.master.ui.web import UiAuth, clean, json_response

__all__ = ["compare_router"]

_Ids = list[Annotated[int, Field(ge=0, le=api.MAX_INT)]]
ExperimentIds = Annotated[_Ids, Query(
    max_length=MAX_TRIALS, description="experiments whose trials to compare (repeat the "
    "parameter: experiment_ids=1&experiment_ids=2)")]
TrialIds = Annotated[_Ids, Query(
    max_length=MAX_TRIALS, description="trials to compare, of any experiments (repeat the "
    "parameter)")]
Best = Annotated[int | None, Query(
    ge=1, le=MAX_TRIALS, description="of each experiment, only its best this many trials "
    "by the searcher metric; none: all of them")]
MaxPoints = Annotated[int, Query(
    ge=MIN_POINTS, le=MAX_POINTS, description="points per series at most (downsampled, "
    "each bucket's extremes kept)")]

_DOC: dict[int | str, dict[str, Any]] = {200: {
    "description": f"at most {MAX_TRIALS} trials: each one's series, hyperparameters and "
                   "experiment; `hparams` and `config` as rows of a value per trial, "
                   "`differs` marking those that differ (det_sdk.master.compare)",
    "content": {"application/json": {"schema": {"type": "object"}}}}}


def compare_router(master: Master, user: Dependency, sessions: Sessions) -> APIRouter:
    """The comparison's two routes over ``master``; ``user`` admits the user's token only
    (``det_sdk.master.routes.common.auth_dependencies``), ``sessions`` are the UI's."""
    router = APIRouter()
    comparer = Comparer(master)
    auth = UiAuth(master, sessions)

    def _visible(p: Principal | None, experiment_ids: list[int], trial_ids: list[int]
                 ) -> None:
        # roles (issue 59): one the caller may not see is answered as none such
        master.roles.check_visible(p, "experiment", experiment_ids)
        master.roles.check_visible(p, "trial", trial_ids)

    @router.get("/api/v1/compare", response_class=Response, responses=_DOC)
    def compare(request: Request, experiment_ids: ExperimentIds = [],  # noqa: B006
                trial_ids: TrialIds = [], best: Best = None,  # noqa: B006
                max_points: MaxPoints = DEFAULT_POINTS,
                p: Principal = Depends(user)) -> Response:
        """Trials of several experiments side by side: their metric series,
        hyperparameters and configs, the rows that differ marked. More than
        `max_trials` trials chosen: 400, naming the limit."""
        _visible(p, experiment_ids, trial_ids)
        return json_response(request, clean(comparer.compare(experiment_ids, trial_ids, best,
                                                             max_points)))

    @router.get("/ui/api/compare", include_in_schema=False)
    def ui_compare(request: Request, experiment_ids: ExperimentIds = [],  # noqa: B006
                   trial_ids: TrialIds = [], best: Best = None,  # noqa: B006
                   max_points: MaxPoints = DEFAULT_POINTS) -> Response:
        auth.user(request)
        _visible(request.scope.get("state", {}).get("det_ui_principal"), experiment_ids,
                 trial_ids)
        return json_response(request, clean(comparer.compare(experiment_ids, trial_ids, best,
                                                             max_points)))

    return router
