"""A trial's log records page after page (``/api/v1/trials/{id}/logs/records``), as
``det t logs`` and ``Trial.iter_logs`` read them: the first N matches (``head``), the last
N (``tail``, read backwards from the end), every match, and with ``follow`` what the trial
writes until it ends. Each request reads a bounded piece of the log on the master; this
iterator holds at most ``tail`` records.

>>> pages = iter([{"records": [{"log": "a"}], "cursor": 2, "done": True, "size": 2}])
>>> [r["log"] for r in iter_records(lambda params: next(pages), {})]
['a']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from det_sdk.errors import UsageError
from det_sdk.log_query import MAX_RECORDS

__all__ = ["DETERMINED_KEYS", "iter_records"]

#: the keys of Determined's ``v1TrialLogsResponse`` (det_sdk's records add ``raw``, ``offset``)
DETERMINED_KEYS = ("id", "level", "message", "timestamp", "trialId", "agentId", "containerId",
                   "log", "rankId", "source", "stdtype")

Fetch = Callable[[dict[str, Any]], dict[str, Any]]


def iter_records(fetch: Fetch, filters: dict[str, Any], *, head: int | None = None,
                 tail: int | None = None, follow: bool = False,
                 ended: Callable[[], bool] | None = None,
                 poll_seconds: float = 0.5) -> Iterator[dict[str, Any]]:
    """The records ``filters`` keep; ``fetch(params)`` is one request of the route.
    ``ended()`` says whether the trial has ended (``follow`` stops after its last line)."""
    if head is not None and tail is not None:
        raise UsageError("head and tail: give one of them (as in Determined)")
    for name, n in (("head", head), ("tail", tail)):
        if n is not None and n < 0:
            raise UsageError(f"{name}: expected a number >= 0, got {n}")
    offset: int | None = 0
    if tail is not None:
        found: list[dict[str, Any]] = []
        offset, end = None, None
        while len(found) < tail:
            params = {**filters, "order": "desc", "limit": min(tail - len(found), MAX_RECORDS)}
            if offset is not None:
                params["offset"] = offset
            page = fetch(params)
            end = page["size"] if end is None else end
            found += page["records"]
            if page["done"]:
                break
            offset = page["cursor"]
        yield from reversed(found)
        if not follow:
            return
        offset = end if end is not None else fetch({**filters, "order": "desc",
                                                    "limit": 1})["size"]
    count = 0
    while True:
        # the state first: every line written before the end is read after it
        final = not follow or ended is None or ended()
        while True:
            if head is not None and count >= head:
                return
            limit = MAX_RECORDS if head is None else min(head - count, MAX_RECORDS)
            page = fetch({**filters, "order": "asc", "offset": offset, "limit": limit})
            for rec in page["records"]:
                yield rec
                count += 1
            offset = page["cursor"]
            if page["done"]:
                break
        if final:
            return
        time.sleep(poll_seconds)
