"""``/prom/det-state-metrics`` (Determined's path): the master's state for a Prometheus
scrape (``det_sdk.master.prom``). A scraper authenticates as the API's callers do, with
the user's token as a bearer token (Prometheus' ``authorization: {credentials_file: ...}``);
a task's token is refused. What the caller may not see (a workspace whose roles hide it)
is not counted: Determined counts every workspace for any signed-in user; det_sdk's counts
follow its lists.

>>> # app.include_router(prom_router(master, user))
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from det_sdk.master.core import Master
from det_sdk.master.prom import CONTENT_TYPE, render, state_of
from det_sdk.master.routes.common import Dependency, Principal

__all__ = ["prom_router"]

_DOC: dict[int | str, dict[str, object]] = {200: {
    "content": {CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}},
    "description": "Prometheus' text exposition format (version 0.0.4)"}}


def prom_router(master: Master, user: Dependency) -> APIRouter:
    """The scrape route over ``master``; ``user`` admits the user's token only."""
    router = APIRouter()

    @router.get("/prom/det-state-metrics", response_class=Response, responses=_DOC)
    def det_state_metrics(p: Principal = Depends(user)) -> Response:
        """Slots, the queue, experiments, trials and jobs by state, as Prometheus gauges:
        only the experiments and trials the caller may see (roles, issue 59)."""
        hidden = master.roles.hidden_workspaces(p)
        return Response(render(state_of(master, hidden)), media_type=CONTENT_TYPE)

    return router
