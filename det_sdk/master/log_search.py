"""A page of a task's log records, filtered, at bounded cost: one request reads at most
:data:`SCAN_BYTES` of the log (and a few KiB of its time index), however large the log
and however few lines match; its ``cursor`` says where the next request goes on. A log of
1 GB is paged through in pieces, never loaded.

Forward (``order="asc"``, ``-f`` and ``--head``) from a byte offset; backward
(``order="desc"``, ``--tail``) from the end or from a cursor, newest match first. A line
longer than :data:`MAX_LINE_BYTES` comes as pieces of that size.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "logs.txt"
>>> _ = p.write_bytes(b"INFO: a\\nERROR: b\\n")
>>> page = read_page(p, 1, Filters(levels=["LOG_LEVEL_ERROR"]), offset=0)
>>> [r["log"] for r in page["records"]], page["cursor"], page["done"]
(['b\\n'], 17, True)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from det_sdk.master.log_clock import TimeIndex
from det_sdk.master.log_records import Filters, parse_line, record

__all__ = ["MAX_LINE_BYTES", "SCAN_BYTES", "read_page"]

#: the most bytes of log one request reads
SCAN_BYTES = 4 << 20
#: a line longer than this comes in pieces of this size
MAX_LINE_BYTES = 64 << 10


def _lines(data: bytes, base: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of each line of ``data`` (which starts at byte ``base``)."""
    start = 0
    while start < len(data):
        nl = data.find(b"\n", start, start + MAX_LINE_BYTES)
        end = nl + 1 if nl >= 0 else min(start + MAX_LINE_BYTES, len(data))
        yield base + start, data[start:end]
        start = end


def _read(path: Path, start: int, size: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(size)
    except (FileNotFoundError, NotADirectoryError):
        return b""


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except (FileNotFoundError, NotADirectoryError):
        return 0


def read_page(path: Path, trial_id: int, filters: Filters, *, offset: int | None = None,
              order: str = "asc", limit: int = 1000, ended: bool = True,
              default_rank: int | None = None) -> dict[str, Any]:
    """Up to ``limit`` records of the log at ``path`` that ``filters`` keep.

    ``asc``: from byte ``offset`` (0: the start) on; a last line without its newline is
    left for a later page while the task runs (``ended`` False). ``desc``: the matches
    before byte ``offset`` (None: the end), newest first. Answers ``records``,
    ``cursor`` (the next page's ``offset``), ``done`` (nothing further that way now),
    ``scanned`` (bytes of log read) and ``size`` (the log's, when read: where a follow
    after a backward page goes on).
    """
    size = _size(path)
    times = TimeIndex(path)
    if order == "asc":
        start = min(offset or 0, size)
        data = _read(path, start, min(SCAN_BYTES, size - start))
        reached_end = start + len(data) >= size
        lines = list(_lines(data, start))
        if lines and not lines[-1][1].endswith(b"\n") and not (reached_end and ended) \
                and len(lines[-1][1]) < MAX_LINE_BYTES:
            lines.pop()  # its newline is still to come: a later page reads it whole
        out: list[dict[str, Any]] = []
        cursor, truncated = start, False
        for at, raw in lines:
            if len(out) >= limit:
                truncated = True
                break
            cursor = at + len(raw)
            rec = _match(at, raw, times, filters, trial_id, default_rank)
            if rec is not None:
                out.append(rec)
        done = reached_end and not truncated
        return {"records": out, "cursor": cursor, "done": done, "scanned": len(data),
                "size": size}
    end = size if offset is None else min(offset, size)
    begin = max(end - SCAN_BYTES, 0)
    data = _read(path, begin, end - begin)
    first = 0
    if begin > 0:
        nl = data.find(b"\n")
        # a line cut by the window's start is the next page's (unless it fills the window)
        first = nl + 1 if 0 <= nl < len(data) - 1 else 0
    lines = list(_lines(data[first:], begin + first))
    matches = []
    for at, raw in reversed(lines):
        rec = _match(at, raw, times, filters, trial_id, default_rank)
        if rec is not None:
            matches.append(rec)
            if len(matches) >= limit:
                return {"records": matches, "cursor": at, "done": at == 0,
                        "scanned": len(data), "size": size}
    cursor = begin + first
    return {"records": matches, "cursor": cursor, "done": cursor == 0, "scanned": len(data),
            "size": size}


def _match(at: int, raw: bytes, times: TimeIndex, filters: Filters, trial_id: int,
           default_rank: int | None) -> dict[str, Any] | None:
    if not filters.keeps_raw(raw):
        return None
    line = parse_line(raw, default_rank)
    when = times.time_at(at + len(raw))
    if not filters.keeps(line, when):
        return None
    return record(at, line, when, trial_id, raw.decode("utf-8", errors="replace"))
