"""``/api/v1/checkpoints``: list, describe and download checkpoints, for any valid token
(a task reads checkpoints for batch inference). A task reports its checkpoints through
``det_sdk.master.routes.tasks``.

>>> # app.include_router(checkpoints_router(master, principal))
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from det_sdk import api
from det_sdk.master.core import Master
from det_sdk.master.errors import NotFound
from det_sdk.master.pages import checkpoint_page
from det_sdk.master.routes.common import (
    ERROR,
    Cursor,
    Dependency,
    Limit,
    Principal,
    as_json,
    checkpoint_download,
)

__all__ = ["checkpoints_router"]

_DOWNLOAD_DOC: dict[int | str, dict] = {
    200: {"content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
          "description": "the checkpoint's directory as a .tar.gz"},
    410: {**ERROR, "description": "recorded, but its files are gone"}}


def checkpoints_router(master: Master, principal: Dependency) -> APIRouter:
    """The checkpoints' routes over ``master``; ``principal`` admits any valid token
    (``det_sdk.master.routes.common.auth_dependencies``)."""
    router = APIRouter(prefix="/api/v1/checkpoints")

    def _hidden(p: Principal) -> set[int]:
        # roles (issue 59): a user's view; a task's token keeps its narrow rights
        return master.roles.hidden_workspaces(p) if p.kind == "user" else set()

    def _seen(p: Principal, uuid: str) -> dict[str, Any]:
        info = master.checkpoint_info(uuid)
        hidden = _hidden(p)
        if hidden and master.roles.workspace_of("trial", str(info["trial_id"])) \
                in hidden:
            raise NotFound(f"no checkpoint {uuid!r}")
        return info

    @router.get("", response_model=api.CheckpointPage)
    def list_checkpoints(trial_id: Annotated[int | None, Query(ge=0, le=api.MAX_INT)] = None,
                         limit: Limit = api.DEFAULT_PAGE_LIMIT, cursor: Cursor = None,
                         p: Principal = Depends(principal)) -> Response:
        """The newest checkpoints (of one trial) first; `next_cursor` continues."""
        page = checkpoint_page(master, trial_id, limit, cursor)
        hidden = _hidden(p)
        if hidden:  # roles (issue 59): leave out what the caller may not see
            page.checkpoints = [
                c for c in page.checkpoints
                if master.roles.workspace_of("trial", str(c.trial_id)) not in hidden]
        return as_json(page)

    @router.get("/{uuid}")
    def get_checkpoint(uuid: str, p: Principal = Depends(principal)) -> api.CheckpointInfo:
        return api.CheckpointInfo(**_seen(p, uuid))

    @router.get("/{uuid}/download", response_class=Response, responses=_DOWNLOAD_DOC)
    def download_checkpoint(uuid: str, p: Principal = Depends(principal)) -> Response:
        _seen(p, uuid)
        return checkpoint_download(master, uuid)

    return router
