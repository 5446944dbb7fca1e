"""``/ui/api/webhooks``: the web UI's Webhooks page (issue 60) over
det_sdk.master.webhooks, admin only as ``/api/v1/webhooks`` is (its rules in
det_sdk.master.permissions): the list with the newest deliveries' outcomes, create (the
answer holds the signing key, shown this once), delete and test. A state-changing call
needs the UI's action header (``UiAuth.action``), as every UI action does.

>>> # app.include_router(ui_webhooks_router(master, sessions))
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from det_sdk.master.core import Master
from det_sdk.master.routes.common import Id
from det_sdk.master.routes.webhooks import WebhookIn
from det_sdk.master.security import Sessions
from det_sdk.master.ui.web import UiAuth

__all__ = ["DELIVERIES_SHOWN", "ui_webhooks_router"]

#: the newest deliveries the page lists
DELIVERIES_SHOWN = 100


def ui_webhooks_router(master: Master, sessions: Sessions) -> APIRouter:
    """The Webhooks page's data and actions."""
    hooks = master.webhooks
    auth = UiAuth(master, sessions)
    router = APIRouter(prefix="/ui/api/webhooks")

    @router.get("", include_in_schema=False)
    def listed(request: Request) -> dict[str, Any]:
        """Every webhook (never a signing key) and the newest deliveries' outcomes."""
        auth.user(request)
        return {"webhooks": hooks.listed(),
                "deliveries": hooks.deliveries(None, DELIVERIES_SHOWN)}

    @router.post("", include_in_schema=False)
    def create(body: WebhookIn, request: Request) -> dict[str, Any]:
        """A webhook; its ``signing_key`` is in this answer only."""
        auth.action(request)
        return {"webhook": hooks.create(body.model_dump(exclude_none=True))}

    @router.delete("/{webhook_id:int}", include_in_schema=False)
    def delete(webhook_id: Id, request: Request) -> dict[str, Any]:
        auth.action(request)
        hooks.delete(webhook_id)
        return {}

    @router.post("/{webhook_id:int}/test", include_in_schema=False)
    def test(webhook_id: Id, request: Request) -> dict[str, bool]:
        """One test event now (one bounded attempt); ``completed``: answered 2xx."""
        auth.action(request)
        return {"completed": hooks.test(webhook_id)}

    return router
