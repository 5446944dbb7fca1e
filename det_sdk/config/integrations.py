"""Determined's ``integrations:`` section: ``webhooks`` (which of the master's webhooks an
experiment names, or that it fires none: det_sdk.master.webhooks); ``pachyderm`` is
accepted and ignored (det_sdk.config.determined).

>>> IntegrationsConfig.model_validate({"webhooks": {"webhook_name": ["ops"]}}).webhooks.exclude
False
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from det_sdk.config._base import _Strict

__all__ = ["IntegrationsConfig", "WebhooksConfig"]

_Name = Annotated[str, Field(min_length=1, max_length=128)]
_Id = Annotated[int, Field(ge=1, le=2**53 - 1)]


class WebhooksConfig(_Strict):
    """``integrations.webhooks``: the webhooks this experiment names (by id or name: a
    SPECIFIC webhook hears only the experiments naming it, and a custom alert goes only
    to those named), or ``exclude: true``: it fires none."""

    webhook_id: list[_Id] | None = Field(default=None, max_length=100)
    webhook_name: list[_Name] | None = Field(default=None, max_length=100)
    exclude: bool = False


class IntegrationsConfig(_Strict):
    webhooks: WebhooksConfig | None = None
