"""``/health`` (anyone) and ``/api/v1/master`` (any token): the master itself.

>>> # app.include_router(cluster_router(master, principal))
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from det_sdk.master.core import Master
from det_sdk.master.routes.common import Dependency, Principal

__all__ = ["cluster_router"]


def cluster_router(master: Master, principal: Dependency) -> APIRouter:
    """The master's health and its slots; ``principal``: the dependency admitting any
    valid token (``det_sdk.master.routes.common.auth_dependencies``)."""
    router = APIRouter()

    @router.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/api/v1/master")
    def master_info(p: Principal = Depends(principal)) -> dict[str, Any]:
        from det_sdk import __version__

        return {"url": master.url, "version": __version__, "slots": master.launcher.slots,
                "free_slots": master.launcher.free_slots()}

    return router
