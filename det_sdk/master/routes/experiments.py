"""``/api/v1/experiments``: create, list, describe, and pause, activate or kill, for the
user's token only.

>>> # app.include_router(experiments_router(master, user))
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from det_sdk import api
from det_sdk.config import (
    ignored_fields,
    ignored_fields_warning,
    launch_warnings,
    parse_experiment_config,
)
from det_sdk.master.core import Master
from det_sdk.master.pages import experiment_detail, experiment_page, trial_page
from det_sdk.master.routes.common import Cursor, Dependency, Id, Limit, Principal, as_json

__all__ = ["experiments_router"]

log = logging.getLogger("det_sdk.master.app")


def experiments_router(master: Master, user: Dependency) -> APIRouter:
    """The experiments' routes over ``master``; ``user``: the dependency admitting the
    user's token (``det_sdk.master.routes.common.auth_dependencies``)."""
    router = APIRouter()

    @router.post("/api/v1/experiments", status_code=201)
    def create_experiment(req: api.CreateExperimentRequest,
                          p: Principal = Depends(user)) -> api.CreateExperimentResponse:
        project_id = master.workspaces.project_for(req.project_id, req.config)  # issue 59
        master.roles.may_create_in(p, project_id)  # roles (issue 59)
        exp_id = master.create_experiment(req.config, req.model_definition, req.activate,
                                          owner_id=p.user_id, project_id=project_id)
        # accepted: the config validated above; workspace and project are read (issue 59)
        ignored = [f for f in ignored_fields(req.config) if f not in ("workspace", "project")]
        warnings = [ignored_fields_warning(ignored)] if ignored else []
        warnings += launch_warnings(parse_experiment_config(req.config))
        for warning in warnings:
            log.warning("experiment %d: %s", exp_id, warning)
        return api.CreateExperimentResponse(id=exp_id, warnings=warnings)

    @router.get("/api/v1/experiments", response_model=api.ExperimentPage)
    def list_experiments(limit: Limit = api.DEFAULT_PAGE_LIMIT, cursor: Cursor = None,
                         archived: bool | None = None,
                         users: Annotated[list[str] | None,
                                          Query(max_length=100)] = None,
                         project_id: Annotated[int | None, Query(ge=1, le=api.MAX_INT)] = None,
                         workspace_id: Annotated[int | None,
                                                 Query(ge=1, le=api.MAX_INT)] = None,
                         p: Principal = Depends(user)) -> Response:
        """The newest experiments first, as summaries; `next_cursor` continues.
        `archived`: only the archived (true) or the others (false); absent: all.
        `users`: only those these users own (Determined's filter, by name).
        `project_id`, `workspace_id`: only those in that project, or that workspace's."""
        owners = None
        if users is not None:
            ids = {u["username"]: u["id"] for u in master.accounts.users()}
            owners = [ids[name] for name in users if name in ids]
        projects = None
        if project_id is not None or workspace_id is not None:
            projects = [pr["id"] for pr in master.workspaces.projects(workspace_id)
                        if project_id is None or pr["id"] == project_id]
        projects = master.roles.visible_projects(p, projects)  # roles (issue 59)
        return as_json(experiment_page(master, limit, cursor, archived, owners, projects))

    @router.get("/api/v1/experiments/{exp_id}", response_model=api.ExperimentInfo)
    def get_experiment(exp_id: Id, trials_limit: Limit = api.DEFAULT_PAGE_LIMIT,
                       p: Principal = Depends(user)) -> Response:
        """The experiment with its first `trials_limit` trials; `trials_next_cursor`
        continues at `/api/v1/experiments/{exp_id}/trials`."""
        return as_json(experiment_detail(master, exp_id, trials_limit))

    @router.get("/api/v1/experiments/{exp_id}/trials", response_model=api.TrialPage)
    def list_trials(exp_id: Id, limit: Limit = api.DEFAULT_PAGE_LIMIT, cursor: Cursor = None,
                    p: Principal = Depends(user)) -> Response:
        """The experiment's trials in the order the searcher created them."""
        return as_json(trial_page(master, exp_id, limit, cursor))

    @router.post("/api/v1/experiments/{exp_id}/pause")
    def pause_experiment(exp_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        master.pause_experiment(exp_id)
        return {"state": master.experiment_state(exp_id)}

    @router.post("/api/v1/experiments/{exp_id}/activate")
    def activate_experiment(exp_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        master.activate_experiment(exp_id)
        return {"state": master.experiment_state(exp_id)}

    @router.post("/api/v1/experiments/{exp_id}/kill")
    def kill_experiment(exp_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        master.kill_experiment(exp_id)
        return {"state": master.experiment_state(exp_id)}

    return router
