"""``Trial.iter_logs`` of Determined 0.38's Python SDK over det_sdk's master (issue 60):
the same arguments (``follow``, ``head``, ``tail``, ``rank_ids``, ``stdtypes``,
``min_level``, ``timestamp_before``/``timestamp_after``, ``sources``, ``search_text``),
each line as Determined's record ``message`` (``[time] [rank=N] || LEVEL: text``).
``search_text`` is a plain, case-sensitive substring, as the master matches it.

>>> LogLevel.WARNING.value
'LOG_LEVEL_WARNING'
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

from det_sdk.log_query import levels_at_or_above, record_params
from det_sdk.log_stream import iter_records

__all__ = ["LogLevel", "iter_trial_logs"]

_ENDED = ("COMPLETED", "CANCELED", "ERROR")


class LogLevel(enum.Enum):
    """Determined's log levels (``determined.experimental.client.LogLevel``)."""

    TRACE = "LOG_LEVEL_TRACE"
    DEBUG = "LOG_LEVEL_DEBUG"
    INFO = "LOG_LEVEL_INFO"
    WARNING = "LOG_LEVEL_WARNING"
    ERROR = "LOG_LEVEL_ERROR"
    CRITICAL = "LOG_LEVEL_CRITICAL"


def iter_trial_logs(session: Any, trial_id: int, follow: bool = False, *,
                    head: int | None = None, tail: int | None = None,
                    container_ids: list[str] | None = None, rank_ids: list[int] | None = None,
                    stdtypes: list[str] | None = None, min_level: Any = None,
                    timestamp_before: str | int | None = None,
                    timestamp_after: str | int | None = None,
                    sources: list[str] | None = None, search_text: str | None = None
                    ) -> Iterator[str]:
    """Trial ``trial_id``'s log lines that the arguments keep (``session``: a
    ``det_sdk.client.MasterClient``). ``container_ids`` is accepted and ignored: det_sdk
    runs no containers (Determined's own SDK ignores ``agent_ids`` likewise)."""
    params = record_params(
        rank_ids=rank_ids, levels=None if min_level is None else levels_at_or_above(min_level),
        stdtypes=stdtypes, sources=sources, timestamp_before=timestamp_before,
        timestamp_after=timestamp_after, search_text=search_text)

    def fetch(p: dict[str, Any]) -> dict[str, Any]:
        return dict(session.request("GET", f"/api/v1/trials/{trial_id}/logs/records",
                                    params=p))

    for rec in iter_records(fetch, params, head=head, tail=tail, follow=follow,
                            ended=lambda: session.trial(trial_id)["state"] in _ENDED):
        yield str(rec["message"])
