"""The queue's steering (det_sdk.master.queue_admin): an experiment's priority, weight and
max_slots (``det e set priority|weight|max-slots``) and a batch job's priority
(``det job update ID --priority N``). Owner or admin only (det_sdk.master.permissions).

>>> ExperimentResourcesEdit(priority=10).priority
10
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from det_sdk.master.core import Master
from det_sdk.master.queue_admin import set_experiment_resources, set_job_priority
from det_sdk.master.routes.common import Dependency, Id, Principal

__all__ = ["ExperimentResourcesEdit", "JobPriorityEdit", "queue_router"]

Priority = Annotated[int, Field(strict=True, ge=1, le=99)]


class ExperimentResourcesEdit(BaseModel):
    """``PATCH /api/v1/experiments/{id}/resources``: the fields to change (absent:
    unchanged). ``priority`` 1-99 (lower first), ``weight`` > 0 (fair share),
    ``max_slots`` >= 1 (and at least ``slots_per_trial``)."""

    model_config = ConfigDict(extra="forbid")

    priority: Priority | None = None
    weight: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] | None = None
    max_slots: Annotated[int, Field(strict=True, ge=1, le=1_000_000)] | None = None


class JobPriorityEdit(BaseModel):
    """``POST /api/v1/jobs/{id}/priority``: the batch job's new priority (1-99)."""

    model_config = ConfigDict(extra="forbid")

    priority: Priority


def queue_router(master: Master, user: Dependency) -> APIRouter:
    """The queue's steering routes over ``master``; ``user``: the dependency admitting
    the user's token (``det_sdk.master.routes.common.auth_dependencies``)."""
    router = APIRouter()

    @router.patch("/api/v1/experiments/{exp_id}/resources")
    def edit_resources(exp_id: Id, edit: ExperimentResourcesEdit,
                       p: Principal = Depends(user)) -> dict[str, Any]:
        """Set the experiment's priority, weight or max_slots; a raised priority may
        preempt lower ones at once. Its resources after."""
        return set_experiment_resources(master, exp_id, edit.priority, edit.weight,
                                        edit.max_slots)

    @router.post("/api/v1/jobs/{job_id}/priority")
    def job_priority(job_id: Id, edit: JobPriorityEdit,
                     p: Principal = Depends(user)) -> dict[str, Any]:
        """Set a batch job's priority (its place in the queue)."""
        return set_job_priority(master, job_id, edit.priority)

    return router
