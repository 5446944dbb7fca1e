"""When each byte of a task's log was written: a time index beside the log.

A task writes its log itself (its processes' standard output, a file): the master never
sits between a training script and its output, so a slow or restarted master never blocks
training. What the file lacks is a time per line; this module adds one without touching
the file: once a tick the master notes each running task's log size, and where it grew
appends ``(size, now)`` to ``logs.times`` beside it (16 bytes; at most one record a tick,
so a week of a busy run is under 10 MB). A line's time is that of the first record whose
size covers the line's end: when the master first saw it, within a tick (a second). Lines
past the last record (the task's last second, or while no master ran) take the log's
modification time, which is exact for its last line.

Reading needs no more than a few records at a time: :class:`TimeIndex` finds the first
record at or past an offset by binary search and then reads on in blocks.

>>> import tempfile, pathlib
>>> log = pathlib.Path(tempfile.mkdtemp()) / "logs.txt"
>>> _ = log.write_bytes(b"a\\nb\\n")
>>> append_mark(times_path(log), 2, 100.0)
>>> TimeIndex(log).time_at(2)
100.0
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["LogClock", "TimeIndex", "append_mark", "times_path"]

log = logging.getLogger("det_sdk.master.log_clock")

_RECORD = struct.Struct("<qd")  # log size in bytes, seconds since the epoch
_BLOCK = 256  # records read at a time (4 KiB)
TICK_SECONDS = 1.0


def times_path(log_path: Path) -> Path:
    """The time index beside ``log_path``."""
    return log_path.with_name(log_path.name + ".times")


def append_mark(path: Path, size: int, when: float) -> None:
    """Note that the log had ``size`` bytes at ``when``."""
    with open(path, "ab") as f:
        f.write(_RECORD.pack(size, when))


class TimeIndex:
    """The times of one log's bytes; :meth:`time_at` for a line's end offset, asked in
    rising order for the cheapest reading (any order works)."""

    def __init__(self, log_path: Path) -> None:
        self._path = times_path(log_path)
        try:
            self._fallback = os.stat(log_path).st_mtime
        except OSError:
            self._fallback = time.time()
        try:
            self._count = os.stat(self._path).st_size // _RECORD.size
        except OSError:
            self._count = 0
        self._block_start, self._block = -1, list[tuple[int, float]]()

    def _load(self, start: int) -> None:
        with open(self._path, "rb") as f:
            f.seek(start * _RECORD.size)
            data = f.read(_BLOCK * _RECORD.size)
        self._block_start = start
        self._block = [_RECORD.unpack_from(data, i)
                       for i in range(0, len(data) - _RECORD.size + 1, _RECORD.size)]

    def _record(self, i: int) -> tuple[int, float]:
        if not self._block_start <= i < self._block_start + len(self._block):
            self._load(i)
        return self._block[i - self._block_start]

    def time_at(self, end: int) -> float:
        """When the log first held byte ``end - 1`` (the line ending at ``end``)."""
        if self._count == 0:
            return self._fallback
        # the block in hand first (lines come in order), else a binary search
        if (self._block and self._block_start + len(self._block) <= self._count
                and self._block[0][0] < end <= self._block[-1][0]):
            lo, hi = self._block_start, self._block_start + len(self._block) - 1
        else:
            lo, hi = 0, self._count
        while lo < hi:
            mid = (lo + hi) // 2
            if self._record(mid)[0] >= end:
                hi = mid
            else:
                lo = mid + 1
        if lo >= self._count:
            return self._fallback
        return self._record(lo)[1]


class LogClock:
    """The thread that marks running tasks' log sizes once a tick.

    ``running_logs`` gives the log paths of the tasks running now (the master's store).
    """

    def __init__(self, running_logs: Callable[[], list[Path]],
                 tick: float = TICK_SECONDS) -> None:
        self._running_logs = running_logs
        self._tick = tick
        self._sizes: dict[Path, int] = {}
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, daemon=True, name="log-clock").start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self._tick):
            try:
                self.mark()
            except Exception:  # the clock must outlive one unreadable log
                log.exception("marking the logs' times failed")

    def _last_marked(self, path: Path) -> int:
        """The size the index last noted (a restarted master goes on from there)."""
        with contextlib.suppress(OSError), open(times_path(path), "rb") as f:
            end = f.seek(0, os.SEEK_END)
            if end >= _RECORD.size:
                f.seek(end - end % _RECORD.size - _RECORD.size)
                return int(_RECORD.unpack(f.read(_RECORD.size))[0])
        return 0

    def mark(self) -> None:
        """One tick: a record for each running task's log that grew."""
        now = time.time()
        running = set(self._running_logs())
        for path in running:
            try:
                size = os.stat(path).st_size
            except OSError:
                continue  # no output yet
            last = self._sizes.get(path)
            if last is None:
                last = self._last_marked(path)
            if size > last:
                try:
                    append_mark(times_path(path), size, now)
                except OSError as err:
                    log.warning("cannot mark %s: %s", path, err)
                    continue
            self._sizes[path] = max(size, last)
        for gone in set(self._sizes) - running:
            del self._sizes[gone]
