"""``/api/v1/webhooks``: Determined 0.38's webhook routes (GetWebhooks, PostWebhook,
DeleteWebhook, PatchWebhook, TestWebhook, PostWebhookEventData) and det_sdk's list of
deliveries (``GET /api/v1/webhooks/deliveries``), over det_sdk.master.webhooks.

The user manages webhooks; a task's token may only send its own trial's custom alert
(``POST /api/v1/webhooks/custom``, ``core_context.alert``).

>>> # app.include_router(webhooks_router(master, principal, user))
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field

from det_sdk import api
from det_sdk.master.core import Master
from det_sdk.master.routes.common import Dependency, Id, Principal, own_trial

__all__ = ["webhooks_router"]

_Text = Field(default="", max_length=10_000)


class TriggerIn(BaseModel):
    """Determined's Trigger: ``trigger_type`` (``EXPERIMENT_STATE_CHANGE`` or ``CUSTOM``,
    the ``TRIGGER_TYPE_`` prefix optional) and its ``condition`` (``{"state": S}``)."""

    model_config = ConfigDict(extra="forbid")
    trigger_type: str = Field(max_length=64)
    condition: dict[str, Any] = Field(default_factory=dict, max_length=8)
    id: int | None = Field(default=None, ge=0, le=api.MAX_INT)
    webhook_id: int | None = Field(default=None, ge=0, le=api.MAX_INT)


class WebhookIn(BaseModel):
    """Determined's Webhook message (PostWebhook's body)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=128)
    url: str = Field(max_length=2048)
    webhook_type: str = Field(max_length=64, description="DEFAULT or SLACK")
    triggers: list[TriggerIn] = Field(max_length=50)
    mode: str | None = Field(default=None, max_length=64,
                             description="WORKSPACE (default) or SPECIFIC")
    workspace_id: int | None = Field(default=None, ge=0, le=api.MAX_INT)
    id: int | None = Field(default=None, ge=0, le=api.MAX_INT)


class PatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(max_length=2048)


class CustomData(BaseModel):
    """Determined's CustomWebhookEventData."""

    model_config = ConfigDict(extra="forbid")
    title: str = _Text
    description: str = _Text
    level: str | None = Field(default=None, max_length=32,
                              description="LOG_LEVEL_INFO, WARNING, ERROR... (default INFO)")


class CustomIn(BaseModel):
    """Determined's PostWebhookEventDataRequest."""

    model_config = ConfigDict(extra="forbid")
    data: CustomData
    experiment_id: int = Field(ge=0, le=api.MAX_INT)
    trial_id: int | None = Field(default=None, ge=0, le=api.MAX_INT)


def webhooks_router(master: Master, principal: Dependency, user: Dependency) -> APIRouter:
    """The webhooks' routes over ``master.webhooks``."""
    hooks = master.webhooks
    router = APIRouter(prefix="/api/v1/webhooks")

    @router.get("")
    def list_webhooks(p: Principal = Depends(user)) -> dict[str, Any]:
        """Every webhook with its triggers (never its signing key)."""
        return {"webhooks": hooks.listed()}

    @router.post("")
    def create_webhook(body: WebhookIn, p: Principal = Depends(user)) -> dict[str, Any]:
        """A webhook; the answer's ``webhook.signing_key`` is shown this once (the
        master signs every delivery with it, Determined's X-Determined-AI-Signature)."""
        return {"webhook": hooks.create(body.model_dump(exclude_none=True))}

    @router.get("/deliveries")
    def list_deliveries(webhook_id: int | None = Query(None, ge=0, le=api.MAX_INT),
                        limit: int = Query(100, ge=1, le=1000),
                        p: Principal = Depends(user)) -> dict[str, Any]:
        """det_sdk's: the newest deliveries (of one webhook), newest first, each with its
        state (QUEUED, SENDING, DELIVERED, FAILED), attempts, last status and error."""
        return {"deliveries": hooks.deliveries(webhook_id, limit)}

    @router.post("/custom")
    def post_event_data(body: CustomIn, p: Principal = Depends(principal)) -> dict[str, Any]:
        """A script's custom alert (``core_context.alert``): to the webhooks with a CUSTOM
        trigger that the experiment's config names. A task may send its own trial's."""
        if p.kind == "task":
            if body.trial_id is None:
                raise HTTPException(403, "a task's alert names its own trial (trial_id)")
            own_trial(body.trial_id, p)
        master.alert(body.experiment_id, body.trial_id, body.data.title,
                     body.data.description, body.data.level)
        return {}

    @router.delete("/{webhook_id:int}")
    def delete_webhook(webhook_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        """The webhook, its triggers and its deliveries' records."""
        hooks.delete(webhook_id)
        return {}

    @router.patch("/{webhook_id:int}")
    def patch_webhook(webhook_id: Id, body: PatchIn,
                      p: Principal = Depends(user)) -> dict[str, Any]:
        """A new URL (checked as at creation)."""
        hooks.set_url(webhook_id, body.url)
        return {}

    @router.post("/{webhook_id:int}/test")
    def test_webhook(webhook_id: Id, p: Principal = Depends(user)) -> dict[str, bool]:
        """A test event sent now (one attempt, bounded), recorded as a TEST delivery;
        ``completed``: answered 2xx."""
        return {"completed": hooks.test(webhook_id)}

    return router
