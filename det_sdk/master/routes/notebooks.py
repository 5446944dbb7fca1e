"""``/api/v1/notebooks``: Determined's notebook routes (``det notebook start``, ``list``,
``open``, ``config``, ``kill``), over ``Master.notebooks`` (``det_sdk.master.notebooks``).
The notebook's log is its command's (``/api/v1/commands/{id}/logs``: a notebook is a
command); JupyterLab itself is behind the proxy (``routes.notebook_proxy``).

What its task reports (``POST .../ready``: JupyterLab's port and token) takes the
notebook's own task token.

>>> # app.include_router(notebooks_router(master, principal, user))
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from det_sdk.master.commands import decode_files
from det_sdk.master.core import Master
from det_sdk.master.routes.common import Dependency, Id, Principal

__all__ = ["LaunchNotebookRequest", "NotebookReady", "notebooks_router"]


class LaunchNotebookRequest(BaseModel):
    """``POST /api/v1/notebooks``: the notebook's config (Determined's: ``description``,
    ``resources.slots``, ``environment``, ``hyperparameters``, ``idle_timeout``,
    ``notebook_idle_type``; no ``entrypoint``) and its context directory (base64 of a
    .tar.gz; none: empty)."""

    model_config = ConfigDict(extra="forbid")

    config: dict[str, Any] = Field(default_factory=dict)
    files: str | None = Field(None, description="base64 of a .tar.gz of the context "
                                                "directory")


class NotebookReady(BaseModel):
    """What a notebook's task reports once JupyterLab listens."""

    model_config = ConfigDict(extra="forbid")

    port: Annotated[int, Field(ge=1, le=65535)]
    token: Annotated[str, Field(min_length=16, max_length=200, pattern=r"^[A-Za-z0-9_-]+$")]


def notebooks_router(master: Master, principal: Dependency, user: Dependency) -> APIRouter:
    """The notebook routes over ``master``."""
    router = APIRouter()

    @router.post("/api/v1/notebooks", status_code=201)
    def launch_notebook(req: LaunchNotebookRequest,
                        p: Principal = Depends(user)) -> dict[str, Any]:
        """Queue a notebook; its JupyterLab starts once slots are free."""
        archive = decode_files(req.files)
        return {"notebook": master.notebooks.create(req.config, archive, p.user_id)}

    @router.get("/api/v1/notebooks")
    def list_notebooks(p: Principal = Depends(user)) -> dict[str, list[dict[str, Any]]]:
        """Every notebook, oldest first."""
        return {"notebooks": master.notebooks.every()}

    @router.get("/api/v1/notebooks/{nb_id}")
    def get_notebook(nb_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        """The notebook: its state, config, and once ready the path that opens it."""
        nb = master.notebooks.get(nb_id)
        return {"notebook": nb, "config": nb["config"]}

    @router.post("/api/v1/notebooks/{nb_id}/kill")
    def kill_notebook(nb_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        """Stop its JupyterLab and every kernel; TERMINATED once they are gone."""
        master.notebooks.get(nb_id)  # 404 for a command that is not a notebook
        master.commands.kill(nb_id)
        return {"notebook": master.notebooks.get(nb_id)}

    @router.post("/api/v1/notebooks/{nb_id}/ready", status_code=204)
    def notebook_ready(nb_id: Id, report: NotebookReady,
                       p: Principal = Depends(principal)) -> Response:
        """The notebook's own task (its task token): JupyterLab listens."""
        if p.kind != "task" or p.allocation is None:
            raise HTTPException(403, "only the notebook's own task reports its JupyterLab")
        master.notebooks.ready(nb_id, str(p.allocation["id"]), report.port, report.token)
        return Response(status_code=204)

    return router
