"""The model registry's routes (``/api/v1/models``): det_sdk.master.models behind the
user token.

>>> # app.include_router(models_router(master, user))
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from det_sdk.master.errors import NotFound
from det_sdk.master.models import ModelRegistry
from det_sdk.master.routes.common import Principal

__all__ = ["models_router"]


class CreateModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=128)
    description: str = Field(default="", max_length=10_000)
    metadata: dict[str, Any] = Field(default_factory=dict, max_length=1000)


class RegisterVersion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checkpoint_uuid: str = Field(max_length=64)


def models_router(master: Any, user: Any) -> APIRouter:
    """``/api/v1/models`` over ``master``'s store; ``user``: the dependency that admits
    the user's token (tasks may not register models).

    >>> # app.include_router(models_router(master, user))
    """
    registry = ModelRegistry(master.store, master.checkpoint_stored)
    router = APIRouter(prefix="/api/v1/models", dependencies=[Depends(user)])

    @router.post("")
    def create_model(body: CreateModel, p: Principal = Depends(user)) -> dict[str, Any]:
        return registry.create(body.name, body.description, body.metadata, p.user_id)

    @router.get("")
    def list_models() -> dict[str, Any]:
        return {"models": registry.list()}

    @router.get("/{ident}")
    def get_model(ident: str) -> dict[str, Any]:
        return registry.get(ident)

    @router.delete("/{ident}")
    def delete_model(ident: str) -> dict[str, Any]:
        """The model and its versions go (the checkpoints stay, for retention to judge)."""
        return registry.delete(ident)

    @router.post("/{ident}/versions")
    def register_version(ident: str, body: RegisterVersion,
                         p: Principal = Depends(user)) -> dict[str, Any]:
        """A version of the model from a checkpoint the caller may see (roles, issue 59:
        one of a workspace hidden from them is answered as none such)."""
        hidden = master.roles.hidden_workspaces(p)
        if hidden:
            trial_id = master.checkpoint_info(body.checkpoint_uuid)["trial_id"]
            if master.roles.workspace_of("trial", str(trial_id)) in hidden:
                raise NotFound(f"no checkpoint {body.checkpoint_uuid!r}")
        return registry.register(ident, body.checkpoint_uuid)

    @router.get("/{ident}/versions")
    def list_versions(ident: str) -> dict[str, Any]:
        return {"versions": registry.versions(ident)}

    @router.get("/{ident}/versions/{version}")
    def get_version(ident: str, version: int) -> dict[str, Any]:
        return registry.version(ident, version)

    return router
