"""A trial's log as records, filtered (issue 60): ``/api/v1/trials/{id}/logs/records`` for
the CLI and the Python clients (the user's token), ``/ui/api/trials/{id}/log-records`` for
the web UI (its session). Determined's filters: ranks, levels, streams, sources, a time
window and a text search (a plain substring: no pattern, so no search can run away).
Each request reads at most ``det_sdk.master.log_search.SCAN_BYTES`` of the log.

>>> # app.include_router(logs_router(master, user, sessions))
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from det_sdk import api
from det_sdk.errors import UsageError
from det_sdk.log_query import LEVELS, MAX_RECORDS, MAX_SEARCH_TEXT, parse_timestamp
from det_sdk.master.core import Master
from det_sdk.master.errors import InvalidRequest
from det_sdk.master.log_records import Filters
from det_sdk.master.log_search import read_page
from det_sdk.master.routes.common import ENDED, Dependency, Id, Principal
from det_sdk.master.security import Sessions
from det_sdk.master.ui.web import UiAuth, json_response

__all__ = ["logs_router"]

_RANKS = Query(None, description="only these ranks (repeat for several)")
_LEVELS = Query(None, description=f"only these levels ({', '.join(LEVELS)})")
_STDTYPES = Query(None, description="only these streams (stdout, stderr)")
_SOURCES = Query(None, description="only lines from these sources (task, master)")
_TIME = Query(None, max_length=64, description="RFC 3339, e.g. 2021-10-26T23:17:12Z")


def _filters(*args: Any) -> Filters:
    """The request's filters; InvalidRequest (400) naming the field that is wrong."""
    try:
        return _parse_filters(*args)
    except UsageError as err:
        raise InvalidRequest(str(err)) from None


def _parse_filters(rank_ids: list[int] | None, levels: list[str] | None,
             stdtypes: list[str] | None, sources: list[str] | None,
             timestamp_after: str | None, timestamp_before: str | None,
             search_text: str | None) -> Filters:
    for level in levels or []:
        if level not in LEVELS:
            raise UsageError(f"levels: {level!r} is not one of {', '.join(LEVELS)}")
    return Filters(
        rank_ids=set(rank_ids) if rank_ids else None, levels=set(levels) if levels else None,
        stdtypes=set(stdtypes) if stdtypes else None, sources=set(sources) if sources else None,
        after=None if timestamp_after is None else parse_timestamp(timestamp_after,
                                                                   "timestamp_after"),
        before=None if timestamp_before is None else parse_timestamp(timestamp_before,
                                                                     "timestamp_before"),
        search_text=search_text or None)


def logs_router(master: Master, user: Dependency, sessions: Sessions) -> APIRouter:
    """The log-record routes over ``master``; ``user`` admits the user's token
    (``det_sdk.master.routes.common.auth_dependencies``), the UI's route its sessions."""
    router = APIRouter()
    ui_auth = UiAuth(master, sessions)

    def page(trial_id: int, filters: Filters, offset: int | None, order: str,
             limit: int) -> dict[str, Any]:
        trial = master.trial(trial_id)
        slots = master.trial_config(trial_id).resources.slots_per_trial
        return read_page(master.logs_path("trials", trial_id), trial_id, filters,
                         offset=offset, order=order, limit=limit,
                         ended=trial["state"] in ENDED,
                         default_rank=0 if slots == 1 else None)

    @router.get("/api/v1/trials/{trial_id}/logs/records")
    def trial_log_records(
            trial_id: Id,
            offset: Annotated[int | None, Query(ge=0, le=api.MAX_INT, description=(
                "asc: the byte to read on from (a page's `cursor`; none: the start); desc: "
                "the byte to read back from (none: the end)"))] = None,
            order: Annotated[str, Query(pattern="^(asc|desc)$")] = "asc",
            limit: Annotated[int, Query(ge=1, le=MAX_RECORDS)] = 1000,
            rank_ids: list[int] | None = _RANKS, levels: list[str] | None = _LEVELS,
            stdtypes: list[str] | None = _STDTYPES, sources: list[str] | None = _SOURCES,
            timestamp_after: str | None = _TIME, timestamp_before: str | None = _TIME,
            search_text: Annotated[str | None, Query(max_length=MAX_SEARCH_TEXT, description=(
                "only lines containing this text (case-sensitive, not a pattern)"))] = None,
            p: Principal = Depends(user)) -> dict[str, Any]:
        """Records as Determined's ``v1TrialLogsResponse`` (plus `raw` and `offset`), a
        page at a time: `cursor` is where the next page starts, `done` that nothing
        further is there now, `scanned` how many bytes of log this request read."""
        filters = _filters(rank_ids, levels, stdtypes, sources, timestamp_after,
                           timestamp_before, search_text)
        return page(trial_id, filters, offset, order, limit)

    @router.get("/ui/api/trials/{trial_id}/log-records", include_in_schema=False)
    def ui_log_records(trial_id: int, request: Request,
                       limit: int = Query(500, ge=1, le=MAX_RECORDS),
                       rank_ids: list[int] | None = _RANKS, levels: list[str] | None = _LEVELS,
                       search_text: str | None = Query(None, max_length=MAX_SEARCH_TEXT)
                       ) -> Response:
        """The newest matching lines for the log view's filters."""
        ui_auth.user(request)
        filters = _filters(rank_ids, levels, None, None, None, None, search_text)
        found = page(trial_id, filters, None, "desc", limit)
        # the rank select's choices: one per process of the trial
        found["ranks"] = master.trial_config(trial_id).resources.slots_per_trial
        return json_response(request, found)

    return router
