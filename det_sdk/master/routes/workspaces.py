"""Workspaces and projects, as Determined 0.38's routes: ``/api/v1/workspaces`` (list,
create), ``/api/v1/workspaces/{id}`` (get, delete), its ``archive``/``unarchive`` and
``projects`` (list, create), ``/api/v1/projects/{id}`` (get, delete) with its
``archive``/``unarchive``, and ``/api/v1/experiments/{id}/move``. Who may call which is
det_sdk.master.permissions' table; the tables are in the store's workspaces module.

>>> # app.include_router(workspaces_router(master, user))
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from det_sdk import api
from det_sdk.master.core import Master
from det_sdk.master.errors import NotFound
from det_sdk.master.routes.common import Dependency, Id, Principal
from det_sdk.master.workspaces import project_out, workspace_out

__all__ = ["workspaces_router"]


class _Body(BaseModel):
    # strict: a JSON true is not a project id, nor "3"
    model_config = ConfigDict(extra="forbid", strict=True)


class PostWorkspaceRequest(_Body):
    """Determined's ``v1PostWorkspaceRequest`` (its name; det_sdk has no pools, agent
    users or storage per workspace)."""

    name: str = Field(min_length=1, max_length=128)


class PostProjectRequest(_Body):
    """Determined's ``v1PostProjectRequest``."""

    name: str = Field(min_length=1, max_length=128)
    description: str = Field("", max_length=4096)
    workspaceId: int | None = Field(None, ge=1, le=api.MAX_INT)


class MoveExperimentRequest(_Body):
    """Determined's ``v1MoveExperimentRequest``."""

    destinationProjectId: int = Field(ge=1, le=api.MAX_INT)
    experimentId: int | None = Field(None, ge=0, le=api.MAX_INT)


def workspaces_router(master: Master, user: Dependency) -> APIRouter:
    """The workspaces' and projects' routes over ``master``; ``user``: the dependency
    admitting a user's token (det_sdk.master.routes.common.auth_dependencies)."""
    router = APIRouter()
    store = master.workspaces

    def _workspace(ws_id: int) -> dict[str, Any]:
        found = store.workspace(ws_id)
        if found is None:
            raise NotFound(f"workspace {ws_id} not found")
        return workspace_out(found, store.user_names())

    def _project(project_id: int) -> dict[str, Any]:
        found = store.project(project_id)
        if found is None:
            raise NotFound(f"project {project_id} not found")
        return project_out(found, store.user_names())

    @router.get("/api/v1/workspaces")
    def list_workspaces(name: str | None = None, archived: bool | None = None,
                        p: Principal = Depends(user)) -> dict[str, Any]:
        """Every workspace by id (``name``: only that one; ``archived``: only the
        archived, or only the others)."""
        names = store.user_names()
        hidden = master.roles.hidden_workspaces(p)  # roles (issue 59)
        return {"workspaces": [workspace_out(w, names) for w in store.workspaces()
                               if w["id"] not in hidden and (name is None or w["name"] == name)
                               and (archived is None or w["archived"] == archived)]}

    @router.post("/api/v1/workspaces")
    def create_workspace(body: PostWorkspaceRequest,
                         p: Principal = Depends(user)) -> dict[str, Any]:
        return {"workspace": _workspace(store.create_workspace(body.name, p.user_id))}

    @router.get("/api/v1/workspaces/{ws_id}")
    def get_workspace(ws_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        return {"workspace": _workspace(ws_id)}

    @router.delete("/api/v1/workspaces/{ws_id}")
    def delete_workspace(ws_id: Id, p: Principal = Depends(user)) -> dict[str, bool]:
        """Delete an empty workspace (and its empty projects): 409 while any of its
        projects holds an experiment, and for the default workspace."""
        store.delete_workspace(ws_id)
        return {"completed": True}

    @router.post("/api/v1/workspaces/{ws_id}/archive")
    def archive_workspace(ws_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        store.set_workspace_archived(ws_id, True)
        return {}

    @router.post("/api/v1/workspaces/{ws_id}/unarchive")
    def unarchive_workspace(ws_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        store.set_workspace_archived(ws_id, False)
        return {}

    @router.get("/api/v1/workspaces/{ws_id}/projects")
    def list_projects(ws_id: Id, name: str | None = None,
                      p: Principal = Depends(user)) -> dict[str, Any]:
        _workspace(ws_id)
        names = store.user_names()
        return {"projects": [project_out(pr, names) for pr in store.projects(ws_id)
                             if name is None or pr["name"] == name]}

    @router.post("/api/v1/workspaces/{ws_id}/projects")
    def create_project(ws_id: Id, body: PostProjectRequest,
                       p: Principal = Depends(user)) -> dict[str, Any]:
        """A project in workspace ``ws_id`` (409 if archived, or its name is taken)."""
        made = store.create_project(ws_id, body.name, body.description, p.user_id)
        return {"project": _project(made)}

    @router.get("/api/v1/projects/{project_id}")
    def get_project(project_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        return {"project": _project(project_id)}

    @router.delete("/api/v1/projects/{project_id}")
    def delete_project(project_id: Id, p: Principal = Depends(user)) -> dict[str, bool]:
        """Delete an empty project: 409 while it holds experiments, and for the default."""
        store.delete_project(project_id)
        return {"completed": True}

    @router.post("/api/v1/projects/{project_id}/archive")
    def archive_project(project_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        store.set_project_archived(project_id, True)
        return {}

    @router.post("/api/v1/projects/{project_id}/unarchive")
    def unarchive_project(project_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        store.set_project_archived(project_id, False)
        return {}

    @router.post("/api/v1/experiments/{exp_id}/move")
    def move_experiment(exp_id: Id, body: MoveExperimentRequest,
                        p: Principal = Depends(user)) -> dict[str, Any]:
        """Put the experiment into another project (one not archived)."""
        store.move_experiment(exp_id, body.destinationProjectId)
        return {}

    return router
