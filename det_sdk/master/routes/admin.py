"""What Determined's CLI does to finished work and to the master, for the user's token:
archive/unarchive, cancel, continue, edit (name, description, labels) and delete experiments,
kill a trial, delete checkpoints, read the master's log, list the tasks (trials and jobs
with their allocations). The work is ``det_sdk.master.experiment_admin``'s.

>>> # app.include_router(admin_router(master, user))
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from det_sdk import api
from det_sdk.master.core import Master
from det_sdk.master.experiment_admin import ExperimentAdmin, job_queue, running_tasks
from det_sdk.master.experiment_continue import continue_experiment
from det_sdk.master.permissions import may_change
from det_sdk.master.routes.common import Dependency, Id, Principal, read_log

__all__ = ["admin_router"]


class ExperimentEdit(BaseModel):
    """``PATCH /api/v1/experiments/{id}``: the fields to change (absent: unchanged)."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(max_length=1024)] | None = None
    description: Annotated[str, Field(max_length=10_000)] | None = None
    labels: Annotated[list[str], Field(max_length=1000)] | None = None


class ExperimentContinuation(BaseModel):
    """``POST /api/v1/experiments/{id}/continue``: Determined's override config (merged
    over the experiment's config; a single searcher's only)."""

    model_config = ConfigDict(extra="forbid")

    override_config: dict[str, Any] = Field(default_factory=dict)


class CheckpointDeletion(BaseModel):
    """``DELETE /api/v1/checkpoints`` (Determined's route): the checkpoints to delete."""

    model_config = ConfigDict(extra="forbid")

    uuids: Annotated[list[Annotated[str, Field(max_length=200)]],
                     Field(min_length=1, max_length=10_000)]


def admin_router(master: Master, user: Dependency) -> APIRouter:
    """The routes over ``master``; ``user``: the dependency admitting the user's token
    (``det_sdk.master.routes.common.auth_dependencies``)."""
    router = APIRouter()
    admin = ExperimentAdmin(master)

    @router.post("/api/v1/experiments/{exp_id}/archive")
    def archive(exp_id: Id, p: Principal = Depends(user)) -> dict[str, bool]:
        """Leave an ended experiment out of the lists (`archived=false`)."""
        admin.archive(exp_id, True)
        return {"archived": True}

    @router.post("/api/v1/experiments/{exp_id}/unarchive")
    def unarchive(exp_id: Id, p: Principal = Depends(user)) -> dict[str, bool]:
        admin.archive(exp_id, False)
        return {"archived": False}

    @router.post("/api/v1/experiments/{exp_id}/cancel")
    def cancel(exp_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        """Ask its trials to stop (they checkpoint and exit); it ends CANCELED."""
        return {"state": admin.cancel(exp_id)}

    @router.post("/api/v1/experiments/{exp_id}/continue")
    def continue_(exp_id: Id, body: ExperimentContinuation,
                  p: Principal = Depends(user)) -> dict[str, Any]:
        """Train an ended experiment further, same ids: a single searcher's trial from its
        latest checkpoint with the override config (e.g. a longer `searcher.max_length`),
        a grid or random search's unfinished trials again."""
        return continue_experiment(master, exp_id, body.override_config)

    @router.patch("/api/v1/experiments/{exp_id}")
    def edit(exp_id: Id, body: ExperimentEdit, p: Principal = Depends(user)) -> dict[str, Any]:
        """Set its name, description or labels."""
        return admin.edit(exp_id, body.name, body.description, body.labels)

    @router.delete("/api/v1/experiments/{exp_id}")
    def delete(exp_id: Id, p: Principal = Depends(user)) -> dict[str, bool]:
        """Delete an ended experiment with its checkpoints' files, logs and records."""
        admin.delete_experiment(exp_id)
        return {"deleted": True}

    @router.post("/api/v1/trials/{trial_id}/kill")
    def kill_trial(trial_id: Id, p: Principal = Depends(user)) -> dict[str, str]:
        """Stop this trial's process now (CANCELED); the experiment's others go on."""
        return {"state": admin.kill_trial(trial_id)}

    @router.delete("/api/v1/checkpoints")
    def delete_checkpoints(body: CheckpointDeletion,
                           p: Principal = Depends(user)) -> dict[str, list[str]]:
        """Delete checkpoints, files and records (none if one cannot go); a user's own
        only (its trial's experiment's owner), an admin's any."""
        for uuid in body.uuids:
            owner = master.accounts.owner_of("checkpoint", uuid)
            if owner is not False:  # an unknown one: delete_checkpoints names it (404)
                may_change(p, int(owner), f"checkpoint {uuid}")
        return {"removed": admin.delete_checkpoints(body.uuids)}

    @router.get("/api/v1/master/logs")
    def master_logs(offset: int = Query(0, ge=0, le=api.MAX_INT),
                    p: Principal = Depends(user)) -> dict[str, Any]:
        """The master's own log from byte `offset` (the next offset follows it)."""
        return read_log(master.data_dir / "master.log", offset)

    @router.get("/api/v1/job-queue")
    def queue(p: Principal = Depends(user)) -> dict[str, list[dict[str, Any]]]:
        """The scheduler's queue: experiments and batch jobs waiting for or holding
        slots, first submitted first (`det job list`)."""
        hidden = master.roles.hidden_workspaces(p)  # roles (issue 59)
        return {"jobs": [j for j in job_queue(master) if not hidden or j["type"] != "EXPERIMENT"
                         or master.roles.workspace_of("experiment", str(j["id"]))
                         not in hidden]}

    @router.get("/api/v1/tasks")
    def tasks(p: Principal = Depends(user)) -> dict[str, list[dict[str, Any]]]:
        """The allocations running now: which trial or job, its state and slots."""
        hidden = master.roles.hidden_workspaces(p)  # roles (issue 59)
        return {"tasks": [t for t in running_tasks(master) if not hidden
                          or t["trial_id"] is None
                          or master.roles.workspace_of("trial", str(t["trial_id"]))
                          not in hidden]}

    return router
