"""``PUT /api/v1/users/{user_id}/agent-user``: Determined's ``det user link-with-agent-user``
(det_sdk.master.agent_users): the Linux account a user's tasks run as when the master runs
as root. Admins only (det_sdk.master.permissions).

>>> AgentUserLink(agent_uid=1001, agent_gid=1001, agent_user="ann", agent_group="ann").agent_uid
1001
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from det_sdk.master.core import Master
from det_sdk.master.routes.common import Dependency, Id, Principal

__all__ = ["AgentUserLink", "agent_users_router"]

_Ident = Annotated[int, Field(strict=True, ge=1, le=2**31 - 1)]
_Name = Annotated[str, Field(min_length=1, max_length=32)]


class AgentUserLink(BaseModel):
    """The account: its uid and gid (non-root) and their names."""

    model_config = ConfigDict(extra="forbid")

    agent_uid: _Ident
    agent_gid: _Ident
    agent_user: _Name
    agent_group: _Name


def agent_users_router(master: Master, user: Dependency) -> APIRouter:
    """The route over ``master``; ``user``: the dependency admitting a user's token."""
    router = APIRouter()

    @router.put("/api/v1/users/{user_id}/agent-user")
    def link_agent_user(user_id: Id, body: AgentUserLink,
                        p: Principal = Depends(user)) -> dict[str, Any]:
        """Link the user to a Linux account: their trials and batch jobs run as it when
        the master runs as root (otherwise as the master's account)."""
        return {"agent_user": master.agent_users.link(user_id, body.agent_uid, body.agent_gid,
                                                      body.agent_user, body.agent_group)}

    return router
