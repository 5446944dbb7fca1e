"""``/api/v1/shells``: Determined's shell routes (``det shell start``, ``list``, ``open``,
``config``, ``kill``), over ``Master.shells`` (``det_sdk.master.shells``). The shell's
log is its command's (``/api/v1/commands/{id}/logs``: a shell is a command).

Its private key (``GET .../key``) is for its owner or an admin only (403 for anyone
else); what its task reports (``POST .../ready``) takes the shell's own task token.

>>> # app.include_router(shells_router(master, principal, user))
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from det_sdk.master.commands import decode_files
from det_sdk.master.core import Master
from det_sdk.master.routes.common import Dependency, Id, Principal

__all__ = ["LaunchShellRequest", "ShellReady", "shells_router"]


class LaunchShellRequest(BaseModel):
    """``POST /api/v1/shells``: the shell's config (Determined's: ``description``,
    ``resources.slots``, ``environment``, ``hyperparameters``; no ``entrypoint``) and its
    context directory (base64 of a .tar.gz; none: empty)."""

    model_config = ConfigDict(extra="forbid")

    config: dict[str, Any] = Field(default_factory=dict)
    files: str | None = Field(None, description="base64 of a .tar.gz of the context "
                                                "directory")


class ShellReady(BaseModel):
    """What a shell's task reports once its sshd listens."""

    model_config = ConfigDict(extra="forbid")

    port: Annotated[int, Field(ge=1, le=65535)]
    host_key: Annotated[str, Field(max_length=400)]
    user: Annotated[str, Field(max_length=64)]


def shells_router(master: Master, principal: Dependency, user: Dependency) -> APIRouter:
    """The shell routes over ``master``."""
    router = APIRouter()

    @router.post("/api/v1/shells", status_code=201)
    def launch_shell(req: LaunchShellRequest,
                     p: Principal = Depends(user)) -> dict[str, Any]:
        """Queue a shell; its sshd starts once slots are free."""
        archive = decode_files(req.files)
        return {"shell": master.shells.create(req.config, archive, p.user_id)}

    @router.get("/api/v1/shells")
    def list_shells(p: Principal = Depends(user)) -> dict[str, list[dict[str, Any]]]:
        """Every shell, oldest first."""
        return {"shells": master.shells.every()}

    @router.get("/api/v1/shells/{shell_id}")
    def get_shell(shell_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        """The shell: its state, config, and once ready its port, user and host key."""
        shell = master.shells.get(shell_id)
        return {"shell": shell, "config": shell["config"]}

    @router.get("/api/v1/shells/{shell_id}/key")
    def shell_key(shell_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        """The private key the shell's sshd accepts: for its owner or an admin only."""
        shell = master.shells.get(shell_id)
        if not (p.admin or (p.kind == "user" and shell["user_id"] == p.user_id)):
            raise HTTPException(403, f"user {p.username!r} may not have shell {shell_id}'s "
                                     "key: only its owner or an admin may")
        return {"private_key": master.shells.private_key(shell_id)}

    @router.post("/api/v1/shells/{shell_id}/kill")
    def kill_shell(shell_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        """Stop its sshd and every session in it; TERMINATED once they are gone."""
        master.shells.get(shell_id)  # 404 for a command that is not a shell
        master.commands.kill(shell_id)
        return {"shell": master.shells.get(shell_id)}

    @router.post("/api/v1/shells/{shell_id}/ready", status_code=204)
    def shell_ready(shell_id: Id, report: ShellReady,
                    p: Principal = Depends(principal)) -> Response:
        """The shell's own task (its task token): its sshd listens."""
        if p.kind != "task" or p.allocation is None:
            raise HTTPException(403, "only the shell's own task reports its sshd")
        master.shells.ready(shell_id, str(p.allocation["id"]), report.port, report.host_key,
                            report.user)
        return Response(status_code=204)

    return router
