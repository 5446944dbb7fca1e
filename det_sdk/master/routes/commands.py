"""``/api/v1/commands``: Determined's command routes (``det cmd run``, ``list``,
``config``, ``kill``, ``logs``), for the user's token only (a task's token is refused,
403, as on every route that acts for the user), but the metrics a command's ``context.fit``
reports with the command's own task token.

Each route is a thin shell over ``Master.commands`` (``det_sdk.master.commands``).

>>> # app.include_router(commands_router(master, user))
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from det_sdk import api
from det_sdk.master.commands import decode_files, read_log_chunk
from det_sdk.master.core import Master
from det_sdk.master.errors import InvalidRequest
from det_sdk.master.routes.common import (
    FILES_DOC,
    Dependency,
    Id,
    Principal,
    task_files,
)
from det_sdk.stages import stored_group

__all__ = ["LaunchCommandRequest", "commands_router"]


class LaunchCommandRequest(BaseModel):
    """``POST /api/v1/commands``: the command's config (Determined's command config:
    ``entrypoint``, ``description``, ``resources.slots``, ``environment``,
    ``hyperparameters``) and its context directory (base64 of a .tar.gz; none: empty)."""

    model_config = ConfigDict(extra="forbid")

    config: dict[str, Any]
    files: str | None = Field(None, description="base64 of a .tar.gz of the context "
                                                "directory")


def commands_router(master: Master, principal: Dependency, user: Dependency) -> APIRouter:
    """The command routes over ``master``, for the user's token; the metrics report for
    the command's own task token too."""
    router = APIRouter()

    @router.post("/api/v1/commands", status_code=201)
    def launch_command(req: LaunchCommandRequest,
                       p: Principal = Depends(user)) -> dict[str, Any]:
        """Queue a command; it runs once slots are free (QUEUED, RUNNING, TERMINATED)."""
        from det_sdk.config import ConfigError
        from det_sdk.config.command import parse_command_config
        try:
            config = parse_command_config(req.config).model_dump(mode="json")
        except (ConfigError, RecursionError) as err:
            raise InvalidRequest(str(err)) from None
        archive = decode_files(req.files)
        return {"command": master.commands.create(config, archive, p.user_id)}

    @router.get("/api/v1/commands")
    def list_commands(p: Principal = Depends(user)) -> dict[str, list[dict[str, Any]]]:
        """Every command, oldest first (ended ones TERMINATED, with their exit)."""
        return {"commands": master.commands.every()}

    @router.get("/api/v1/commands/{cmd_id}")
    def get_command(cmd_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        """The command, its state, exit and config."""
        cmd = master.commands.get(cmd_id)
        return {"command": cmd, "config": cmd["config"]}

    @router.post("/api/v1/commands/{cmd_id}/kill")
    def kill_command(cmd_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        """Stop it: SIGTERM to its processes, SIGKILL after the grace; TERMINATED once
        they are gone (a queued one at once; an ended one is left as it is)."""
        return {"command": master.commands.kill(cmd_id)}

    @router.post("/api/v1/commands/{cmd_id}/metrics", status_code=204)
    def report_command_metrics(cmd_id: Id, report: api.MetricsReport,
                               p: Principal = Depends(principal)) -> Response:
        """`context.fit` in the command reports its metrics (its own task token, or the
        user's), validated as a trial's; one report per (group, step); the latest of
        each group shows in `det cmd describe`."""
        if p.kind == "task" and (p.allocation or {}).get("id") != \
                master.commands.allocation_of(cmd_id):
            raise HTTPException(403, "this task's token cannot report for another command")
        master.commands.report_metrics(cmd_id, stored_group(report.group, report.stage),
                                       report.steps_completed, report.epoch, report.metrics)
        return Response(status_code=204)

    @router.get("/api/v1/commands/{cmd_id}/files", response_class=Response,
                responses=FILES_DOC)
    def command_files(cmd_id: Id, p: Principal = Depends(user)) -> Response:
        """The files the command wrote into its working directory (a fit's local run,
        det-runs/, among them), kept when it ended."""
        state = master.commands.get(cmd_id)["state"]
        return task_files(master, "commands", cmd_id,
                          "COMPLETED" if state == "TERMINATED" else state)

    @router.get("/api/v1/commands/{cmd_id}/logs")
    def command_logs(cmd_id: Id, offset: int = Query(0, ge=0, le=api.MAX_INT),
                     p: Principal = Depends(user)) -> dict[str, Any]:
        """What the command printed, from byte ``offset`` (1 MiB at most per call, ended
        at a whole UTF-8 character; the next offset follows it)."""
        master.commands.get(cmd_id)
        return read_log_chunk(master.commands.logs_path(cmd_id), offset)

    return router
