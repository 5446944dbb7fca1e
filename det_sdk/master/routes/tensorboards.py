"""``/api/v1/tensorboards``: TensorBoard servers the master runs (``det tensorboard start``,
``list``, ``kill``, ``open``, ``logs``; Determined's paths). The user's token only: a
task's token is refused (403), as on every route that acts on the user's behalf.

Each route is a thin shell over ``Master.start_tensorboard`` and ``Master.tensorboards``
(``det_sdk.master.tensorboards``); ids are Determined's UUIDs, or a unique beginning of one.

>>> # app.include_router(tensorboards_router(master, user))
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from det_sdk import api
from det_sdk.master.core import Master
from det_sdk.master.routes.common import Dependency, Principal, read_log

__all__ = ["tensorboards_router"]

#: a UUID, or its beginning (the master's NotFound names one it does not know)
TbId = Annotated[str, Path(min_length=1, max_length=36, pattern=r"^[0-9a-fA-F-]+$")]


def tensorboards_router(master: Master, user: Dependency) -> APIRouter:
    """The TensorBoard routes over ``master``, for the user's token."""
    router = APIRouter()

    def info(rec: dict[str, Any]) -> api.TensorBoardInfo:
        # its owner by id, shown by the user's current name
        owner, name = master.accounts.owner(rec.get("user_id"))
        return api.TensorBoardInfo(**{**rec, "user_id": owner, "username": name})

    @router.post("/api/v1/tensorboards", status_code=201)
    def launch(req: api.LaunchTensorBoardRequest,
               p: Principal = Depends(user)) -> dict[str, api.TensorBoardInfo]:
        """Start TensorBoard over the trials' event files; STARTING until it serves (poll
        ``GET /api/v1/tensorboards/{id}``). 404 names an unknown experiment or trial."""
        # roles (issue 59): an experiment the caller may not see is as none such
        master.roles.check_visible(p, "experiment", list(req.experiment_ids or []))
        master.roles.check_visible(p, "trial", list(req.trial_ids or []))
        rec = master.start_tensorboard(req.experiment_ids, req.trial_ids, req.description,
                                       p.user_id)
        return {"tensorboard": info(rec)}

    @router.get("/api/v1/tensorboards")
    def list_tensorboards(p: Principal = Depends(user)) -> dict[str, list[api.TensorBoardInfo]]:
        """Every TensorBoard the master knows, oldest first (the newest 100 ended ones)."""
        return {"tensorboards": [info(r) for r in master.tensorboards.list()]}

    @router.get("/api/v1/tensorboards/{tb_id}")
    def get_tensorboard(tb_id: TbId, p: Principal = Depends(user)
                        ) -> dict[str, api.TensorBoardInfo]:
        return {"tensorboard": info(master.tensorboards.get(tb_id))}

    @router.post("/api/v1/tensorboards/{tb_id}/kill")
    def kill_tensorboard(tb_id: TbId, p: Principal = Depends(user)
                         ) -> dict[str, api.TensorBoardInfo]:
        """Stop it (TERMINATED once its process is gone); an ended one is left as it is."""
        return {"tensorboard": info(master.tensorboards.kill(tb_id))}

    @router.get("/api/v1/tensorboards/{tb_id}/logs")
    def tensorboard_logs(tb_id: TbId, offset: int = Query(0, ge=0, le=api.MAX_INT),
                         p: Principal = Depends(user)) -> dict[str, Any]:
        """What TensorBoard printed, from byte ``offset`` (as a trial's log)."""
        rec = master.tensorboards.get(tb_id)
        return read_log(master.tensorboards.log_path(rec["id"]), offset)

    return router
