"""A task's log line as Determined's record: its rank, level, stream, source and time,
parsed from the raw line when it is read (the log file stays the one source of truth,
written by the task's own processes: training never waits on the master for its log).

What a line carries, and where it comes from:

- **rank**: the launcher's prefix: ``horovodrun``'s ``[1]<stdout>:`` (every line of a
  multi-slot task), Determined's ``[rank=1]`` (``det_sdk.launch.wrap_rank``), torchrun's
  ``[default1]:``. A line without one has no rank (``rankId`` null) unless the task has
  one process, whose rank is 0.
- **stdtype**: ``horovodrun``'s ``<stdout>``/``<stderr>``; a one-process task's two streams
  share one file, and its lines take their stream from the stream index beside it
  (:mod:`det_sdk.log_streams`, read by :mod:`det_sdk.master.log_search`), null where it
  has none (a run older than the index, the master's own notes).
- **level**: Determined's rule (its ``ship_logs.py``): ``LEVEL:`` at the start of the line
  after the rank (``det.LOG_FORMAT``, Python's default ``WARNING:root:...``); otherwise
  ``LOG_LEVEL_INFO``, as Determined files an unmarked line.
- **source**: ``master`` for the lines the master itself appends (``det_sdk: ...``),
  ``task`` for the others.
- **time**: from the log's time index (``det_sdk.master.log_clock``): when the master
  first saw the line, within its tick.

>>> r = parse_line(b"[1]<stderr>:WARNING: [12] root: slow\\n")
>>> r.rank, r.stdtype, r.level, r.log
(1, 'stderr', 'LOG_LEVEL_WARNING', 'slow\\n')
>>> parse_line(b"[rank=0] INFO: hello\\n").level
'LOG_LEVEL_INFO'
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from det_sdk.log_query import format_timestamp

__all__ = ["Filters", "Line", "parse_line", "record"]

# horovodrun: "[{index}]<{stdout|stderr}>:", after a time.asctime() with
# --prefix-output-with-timestamp
_HOROVOD = re.compile(rb"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?"
                      rb"\[(\d{1,6})\]<(stdout|stderr)>:")
_WRAP_RANK = re.compile(rb" ?\[rank=(\d{1,6})\] ?")
_TORCHRUN = re.compile(rb"\[default(\d{1,6})\]:")
# Determined's level rule, and det.LOG_FORMAT's "[pid] logger: " after it
_LEVEL = re.compile(r" ?(TRACE|DEBUG|INFO|WARNING|ERROR|CRITICAL): ?(?:\[\d+\] [\w.]+: )?")
_MASTER_MARK = b"det_sdk: "


@dataclass
class Line:
    """One parsed line; ``log`` is its text with the prefixes taken off."""

    rank: int | None
    stdtype: str | None
    level: str
    source: str
    log: str


def parse_line(raw: bytes, default_rank: int | None = None) -> Line:
    """The fields of one raw log line (with its newline, if it has one)."""
    rank, stdtype = default_rank, None
    m = _HOROVOD.match(raw)
    if m:
        rank, stdtype = int(m.group(1)), m.group(2).decode()
        raw = raw[m.end():]
    else:
        m = _WRAP_RANK.match(raw) or _TORCHRUN.match(raw)
        if m:
            rank = int(m.group(1))
            raw = raw[m.end():]
    source = "master" if raw.startswith(_MASTER_MARK) else "task"
    text = raw.decode("utf-8", errors="replace")
    level = "LOG_LEVEL_INFO"
    lm = _LEVEL.match(text)
    if lm:
        level = f"LOG_LEVEL_{lm.group(1)}"
        text = text[lm.end():]
    return Line(rank, stdtype, level, source, text)


@dataclass
class Filters:
    """What a request keeps (every given filter must hold; none given: every line).

    ``search_text`` is a plain, case-sensitive substring of the raw line: no pattern
    language, so no search can take more than linear time.
    """

    rank_ids: Collection[int] | None = None
    levels: Collection[str] | None = None
    stdtypes: Collection[str] | None = None
    sources: Collection[str] | None = None
    after: float | None = None
    before: float | None = None
    search_text: str | None = None

    def __post_init__(self) -> None:
        #: the search text's bytes (None: no text search)
        self.needle = None if self.search_text is None else self.search_text.encode()
        # a level filter without INFO (the level of an unmarked line): a kept line holds
        # one of its "LEVEL:" marks, a test on bytes before any parsing
        self._tags: tuple[bytes, ...] | None = None
        if self.levels and "LOG_LEVEL_INFO" not in self.levels:
            self._tags = tuple(f"{lv[len('LOG_LEVEL_'):]}:".encode() for lv in self.levels
                               if lv != "LOG_LEVEL_UNSPECIFIED")

    @property
    def marks(self) -> tuple[bytes, ...]:
        """The "LEVEL:" marks one of which a kept line holds (empty: no such test), for
        finding candidate lines at C speed.

        >>> Filters(levels=["LOG_LEVEL_ERROR"]).marks, Filters().marks
        ((b'ERROR:',), ())
        """
        return self._tags or ()

    def may_match(self, raw: bytes) -> bool:
        """False when no line of ``raw`` (a line, or a whole piece of the log) can be kept:
        the cheap tests on bytes, before a line is parsed."""
        if self.needle is not None and self.needle not in raw:
            return False
        return self._tags is None or any(tag in raw for tag in self._tags)

    def keeps(self, line: Line, when: float) -> bool:
        if self.rank_ids and line.rank not in self.rank_ids:
            return False
        if self.levels and line.level not in self.levels:
            return False
        if self.stdtypes and line.stdtype not in self.stdtypes:
            return False
        if self.sources and line.source not in self.sources:
            return False
        if self.after is not None and when <= self.after:
            return False
        return self.before is None or when < self.before


def record(offset: int, line: Line, when: float, trial_id: int, raw: str) -> dict[str, Any]:
    """Determined's ``v1TrialLogsResponse`` as JSON (``det t logs --json``), with det_sdk's
    ``raw`` (the line as the task wrote it) and ``offset`` (its byte in the log file).

    >>> rec = record(0, parse_line(b"INFO: x\\n"), 0.0, 7, "INFO: x\\n")
    >>> rec["message"]
    '[1970-01-01T00:00:00.000000Z]          || INFO: x\\n'
    """
    stamp = format_timestamp(when)
    # Determined's message: "[time] <container id, 8 wide> [rank=N] || LEVEL: text"
    parts = [f"[{stamp}]", " " * 8]
    if line.rank is not None:
        parts.append(f"[rank={line.rank}]")
    parts += ["||", f"{line.level[len('LOG_LEVEL_'):]}:", line.log]
    return {"id": str(offset), "trialId": trial_id, "timestamp": stamp,
            "level": line.level, "message": " ".join(parts), "log": line.log,
            "agentId": None, "containerId": None, "rankId": line.rank,
            "source": line.source, "stdtype": line.stdtype, "offset": offset, "raw": raw}
