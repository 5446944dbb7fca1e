"""Durations as Determined's settings write them (Go's ``time.Duration``: ``"168h"``,
``"1h30m"``, ``"90s"``), plus days (``"7d"``) and a bare number of seconds.

Light on purpose (no third-party import): ``det master up --token-lifetime`` parses its
value here before it starts anything, and the master parses it again at start.

>>> parse_duration("1h30m", "token lifetime")
5400.0
>>> describe(7 * 24 * 3600)
'7d'
"""

from __future__ import annotations

import re

from det_sdk.errors import UsageError

__all__ = ["describe", "parse_duration"]

_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(text: str, field: str, minimum: float = 1.0,
                   maximum: float = 365 * 86400.0) -> float:
    """``text`` in seconds; UsageError naming ``field`` and what was expected when it is
    no duration or outside ``[minimum, maximum]`` seconds.

    >>> parse_duration("7d", "token lifetime")
    604800.0
    >>> parse_duration("3600", "token lifetime")
    3600.0
    >>> parse_duration("soon", "token lifetime")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    det_sdk.errors.UsageError: token lifetime: 'soon': expected a duration such as 168h, ...
    >>> parse_duration("0s", "token lifetime")
    Traceback (most recent call last):
    ...
    det_sdk.errors.UsageError: token lifetime: '0s': expected at least 1 s and at most 365 days
    """
    value = text.strip() if isinstance(text, str) else ""
    if _NUMBER.fullmatch(value):
        seconds = float(value)
    elif _WHOLE.fullmatch(value):
        seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(value))
    else:
        raise UsageError(f"{field}: {str(text)[:40]!r}: expected a duration such as 168h, 7d, "
                         "30m or 90s (or a number of seconds)")
    if not minimum <= seconds <= maximum:
        raise UsageError(f"{field}: {str(text)[:40]!r}: expected at least {minimum:g} s and at "
                         f"most {maximum / 86400:g} days")
    return seconds


def describe(seconds: float) -> str:
    """``seconds`` as the largest whole unit that states it exactly (``"7d"``, ``"90s"``).

    >>> describe(90), describe(7200), describe(1.5)
    ('90s', '2h', '1.5s')
    """
    for unit in ("d", "h", "m"):
        if seconds >= _UNIT[unit] and seconds % _UNIT[unit] == 0:
            return f"{int(seconds // _UNIT[unit])}{unit}"
    return f"{seconds:g}s"
