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
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from det_sdk.log_streams import StreamIndex
from det_sdk.master.log_clock import TimeIndex
from det_sdk.master.log_records import Filters, parse_line, record

__all__ = ["MAX_LINE_BYTES", "SCAN_BYTES", "read_page"]

#: the most bytes of log one request reads
SCAN_BYTES = 4 << 20
#: a line longer than this comes in pieces of this size
MAX_LINE_BYTES = 64 << 10
_WINDOW = 256 << 10  # the bytes split into lines at a time


def _lines(data: bytes, base: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of each line of ``data`` (which starts at byte ``base``), a line
    longer than :data:`MAX_LINE_BYTES` in pieces of that size. (``bytes.split`` finds
    the lines at C speed: a page of 4 MiB is 50,000 lines; it splits a window of
    :data:`_WINDOW` at a time, cut after a newline, so that a page that stops at its
    ``limit`` of records early has not split the rest.)"""
    at, size = 0, len(data)
    while at < size:
        stop = min(at + _WINDOW, size)
        if stop < size:
            nl = data.rfind(b"\n", at, stop)
            if nl < 0:  # one line longer than the window: to its end
                nl = data.find(b"\n", stop)
            stop = size if nl < 0 else nl + 1
        yield from _split(data[at:stop], base + at)
        at = stop


def _split(data: bytes, base: int) -> Iterator[tuple[int, bytes]]:
    """:func:`_lines` of one window (which ends after a newline, or at the end)."""
    pieces = data.split(b"\n")
    last = len(pieces) - 1
    at = base
    for i, piece in enumerate(pieces):
        if i < last:
            piece += b"\n"
        elif not piece:
            return
        while len(piece) > MAX_LINE_BYTES:
            yield at, piece[:MAX_LINE_BYTES]
            at += MAX_LINE_BYTES
            piece = piece[MAX_LINE_BYTES:]
        yield at, piece
        at += len(piece)


def _spans(data: bytes, needle: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each line of ``data`` holding ``needle``, in order (C speed)."""
    pos = data.find(needle)
    while pos >= 0:
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end + 1
        yield start, end
        pos = data.find(needle, end)


def _candidates(data: bytes, base: int, needle: bytes | None,
                needles: tuple[bytes, ...] = ()) -> Iterator[tuple[int, bytes]]:
    """The lines of ``data`` (as :func:`_lines` cuts them) that may hold ``needle`` (or,
    without one, any of ``needles``: a level filter's marks): only the lines around their
    occurrences (found at C speed), in order; every line when there is nothing to find."""
    if needle is not None:
        spans: Iterable[tuple[int, int]] = _spans(data, needle)
    elif needles:
        # each line once, in order, whichever marks it holds (a few per page: a level
        # filter that keeps most lines has INFO in it, and no marks)
        spans = sorted({span for n in needles for span in _spans(data, n)})
    else:
        yield from _lines(data, base)
        return
    for start, end in spans:
        if end - start > MAX_LINE_BYTES:  # a long line's pieces, cut as _lines cuts them
            yield from _lines(data[start:end], base + start)
        else:
            yield base + start, data[start:end]


def _complete_end(data: bytes, base: int, whole: bool) -> int:
    """Where the last line of ``data`` that :func:`read_page` would read ends: all of it
    when ``whole`` or when it ends with a newline, else before its unfinished last line
    (whose full pieces count)."""
    if whole or data.endswith(b"\n"):
        return base + len(data)
    tail = data.rfind(b"\n") + 1
    return base + tail + (len(data) - tail) // MAX_LINE_BYTES * MAX_LINE_BYTES


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
    streams = StreamIndex(path)
    if order == "asc":
        start = min(offset or 0, size)
        data = _read(path, start, min(SCAN_BYTES, size - start))
        reached_end = start + len(data) >= size
        # the line at the end without its newline waits for it while the task runs
        complete = _complete_end(data, start, reached_end and ended)
        if not filters.may_match(data):  # no line of this piece can match: skip it whole
            return {"records": [], "cursor": complete, "done": reached_end, "scanned": len(data),
                    "size": size}
        out: list[dict[str, Any]] = []
        cursor, truncated = start, False
        for at, raw in _candidates(data[:complete - start], start, filters.needle,
                                   filters.marks):
            if len(out) >= limit:
                truncated = True
                break
            cursor = at + len(raw)
            rec = _match(at, raw, times, streams, filters, trial_id, default_rank)
            if rec is not None:
                out.append(rec)
        if not truncated:
            cursor = complete
        return {"records": out, "cursor": cursor, "done": reached_end and not truncated,
                "scanned": len(data), "size": size}
    end = size if offset is None else min(offset, size)
    begin = max(end - SCAN_BYTES, 0)
    data = _read(path, begin, end - begin)
    first = 0
    if begin > 0:
        nl = data.find(b"\n")
        # a line cut by the window's start is the next page's (unless it fills the window)
        first = nl + 1 if 0 <= nl < len(data) - 1 else 0
    if not filters.may_match(data):
        cursor = begin + first
        return {"records": [], "cursor": cursor, "done": cursor == 0, "scanned": len(data),
                "size": size}
    lines = list(_candidates(data[first:], begin + first, filters.needle, filters.marks))
    matches = []
    for at, raw in reversed(lines):
        rec = _match(at, raw, times, streams, filters, trial_id, default_rank)
        if rec is not None:
            matches.append(rec)
            if len(matches) >= limit:
                return {"records": matches, "cursor": at, "done": at == 0,
                        "scanned": len(data), "size": size}
    cursor = begin + first
    return {"records": matches, "cursor": cursor, "done": cursor == 0, "scanned": len(data),
            "size": size}


def _match(at: int, raw: bytes, times: TimeIndex, streams: StreamIndex, filters: Filters,
           trial_id: int, default_rank: int | None) -> dict[str, Any] | None:
    if not filters.may_match(raw):
        return None
    line = parse_line(raw, default_rank)
    if line.stdtype is None:  # one process's two streams in one file: its stream index says
        line.stdtype = streams.stream_at(at)
    when = times.time_at(at + len(raw))
    if not filters.keeps(line, when):
        return None
    return record(at, line, when, trial_id, raw.decode("utf-8", errors="replace"))
