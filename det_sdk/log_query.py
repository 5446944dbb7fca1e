"""The filters of a trial's log records, as Determined's API names them, shared by the CLI
and the Python clients (no master code here: the master parses lines in
``det_sdk.master.log_records``).

Levels are Determined's ``LOG_LEVEL_*`` names, in rising order; a minimum level is every
level at or above it. Timestamps are RFC 3339 strings (``2021-10-26T23:17:12Z``) or
seconds since the epoch, as Determined's ``Trial.iter_logs`` takes them.

>>> levels_at_or_above("WARNING")
['LOG_LEVEL_WARNING', 'LOG_LEVEL_ERROR', 'LOG_LEVEL_CRITICAL']
>>> parse_timestamp("1970-01-01T00:01:00Z", "timestamp_after")
60.0
>>> format_timestamp(60.5)
'1970-01-01T00:01:00.500000Z'
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from det_sdk.errors import UsageError

__all__ = ["LEVELS", "MAX_RECORDS", "MAX_SEARCH_TEXT", "format_timestamp",
           "levels_at_or_above", "parse_timestamp", "record_params"]

#: Determined's v1LogLevel names, lowest first (UNSPECIFIED: a line without a level)
LEVELS = ("LOG_LEVEL_UNSPECIFIED", "LOG_LEVEL_TRACE", "LOG_LEVEL_DEBUG", "LOG_LEVEL_INFO",
          "LOG_LEVEL_WARNING", "LOG_LEVEL_ERROR", "LOG_LEVEL_CRITICAL")
#: the most records one request answers
MAX_RECORDS = 5000
#: the longest ``search_text`` (a substring, not a pattern: no regex to go catastrophic)
MAX_SEARCH_TEXT = 1000


def _level_name(level: Any) -> str:
    """``"WARNING"``, ``"LOG_LEVEL_WARNING"`` or an enum whose value is either."""
    name = str(getattr(level, "value", level)).upper()
    full = name if name.startswith("LOG_LEVEL_") else f"LOG_LEVEL_{name}"
    if full not in LEVELS:
        raise UsageError(f"level: {level!r} is not one of "
                         f"{', '.join(n[len('LOG_LEVEL_'):] for n in LEVELS)}")
    return full


def levels_at_or_above(level: Any) -> list[str]:
    """Every level from ``level`` up (Determined's ``--level``: this one or higher)."""
    return list(LEVELS[LEVELS.index(_level_name(level)):])


def parse_timestamp(value: str | int | float, field: str) -> float:
    """Seconds since the epoch of an RFC 3339 string or a number; UsageError naming
    ``field`` otherwise."""
    if isinstance(value, bool):
        raise UsageError(f"{field}: expected an RFC 3339 time or epoch seconds, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    text = value.strip()
    try:
        when = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z"))
                                               else text)
    except ValueError:
        raise UsageError(f"{field}: {value!r} is not an RFC 3339 time (e.g. "
                         "2021-10-26T23:17:12Z)") from None
    if when.tzinfo is None:  # no zone given: UTC, as Determined's master reads it
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def format_timestamp(seconds: float) -> str:
    """RFC 3339 in UTC with microseconds, as Determined's records carry their time."""
    when = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_params(*, rank_ids: Iterable[int] | None = None, levels: Iterable[str] | None = None,
                  stdtypes: Iterable[str] | None = None, sources: Iterable[str] | None = None,
                  timestamp_before: str | int | float | None = None,
                  timestamp_after: str | int | float | None = None,
                  search_text: str | None = None) -> dict[str, Any]:
    """The query parameters of ``/api/v1/trials/{id}/logs/records`` for these filters
    (checked here first, so that a bad one is a clear error before any request).

    >>> record_params(rank_ids=[1], search_text="loss")
    {'rank_ids': [1], 'search_text': 'loss'}
    """
    params: dict[str, Any] = {}
    if rank_ids:
        params["rank_ids"] = [int(r) for r in rank_ids]
    if levels:
        params["levels"] = [_level_name(lv) for lv in levels]
    if stdtypes:
        params["stdtypes"] = list(stdtypes)
    if sources:
        params["sources"] = list(sources)
    for name, value in (("timestamp_before", timestamp_before),
                        ("timestamp_after", timestamp_after)):
        if value is not None:
            params[name] = format_timestamp(parse_timestamp(value, name))
    if search_text is not None:
        if len(search_text) > MAX_SEARCH_TEXT:
            raise UsageError(f"search_text: at most {MAX_SEARCH_TEXT} characters")
        params["search_text"] = search_text
    return params
