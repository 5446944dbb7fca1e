"""Which stream each byte of a one-process task's log came from: a stream index beside it.

A task of one slot writes its standard output and standard error to one file
(``logs.txt``): the bytes carry no stream. :mod:`det_sdk.launch.catch` reads the two
streams from pipes and writes them on itself, so it knows; it notes where in the file each
run of one stream starts, in ``logs.txt.streams`` beside the log (as
:mod:`det_sdk.master.log_clock` notes times in ``logs.txt.times``). A record is 9 bytes,
``(offset, stream)``, written only when the stream changes (one per run of writes, not one
per line), and the index stops at :data:`MAX_RECORDS` with a record saying "unknown from
here": a program that alternates its streams line by line cannot grow it without bound.

Bytes another writer put in the file between two of the task's writes (the master's own
``det_sdk: ...`` notes) get the stream "unknown". A log without an index (a run older
than the index, a task of several slots, whose lines carry horovodrun's
``<stdout>``/``<stderr>`` prefix) reads as "unknown" throughout.

>>> import io, tempfile, pathlib
>>> log = pathlib.Path(tempfile.mkdtemp()) / "logs.txt"
>>> with open(log, "ab") as f:
...     w = StreamIndexWriter(streams_path(log), f.fileno())
...     for stream, data in ((STDOUT, b"out\\n"), (STDERR, b"err\\n")):
...         w.before_write(stream)
...         _ = f.write(data); f.flush()
...         w.after_write(len(data))
...     w.close()
>>> index = StreamIndex(log)
>>> index.stream_at(0), index.stream_at(4), StreamIndex(log.with_name("x")).stream_at(0)
('stdout', 'stderr', None)
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import BinaryIO

__all__ = ["MAX_RECORDS", "STDERR", "STDOUT", "UNKNOWN", "StreamIndex", "StreamIndexWriter",
           "streams_path"]

log = logging.getLogger("det_sdk.log_streams")

_RECORD = struct.Struct("<qB")  # the byte where a run starts, its stream's code
_BLOCK = 512  # records read at a time (4.5 KiB)
#: the stream codes
UNKNOWN, STDOUT, STDERR = 0, 1, 2
_NAMES = {STDOUT: "stdout", STDERR: "stderr"}
#: the most records an index holds (9 MiB): past them the stream is unknown
MAX_RECORDS = 1 << 20


def streams_path(log_path: Path) -> Path:
    """The stream index beside ``log_path``.

    >>> streams_path(Path("/t/logs.txt")).name
    'logs.txt.streams'
    """
    return log_path.with_name(log_path.name + ".streams")


class StreamIndexWriter:
    """Notes the runs of one writer's two streams into the log open as ``fd`` (in append
    mode): call :meth:`before_write` and :meth:`after_write` around each write. Never
    raises: an index that cannot be written is given up (the log itself matters more)."""

    def __init__(self, path: Path, fd: int) -> None:
        self._path = path
        self._fd = fd
        self._file: BinaryIO | None = None
        self._count = 0
        self._stream = UNKNOWN  # the stream of the last run noted
        self._end: int | None = None  # where the last write ended
        self._pos = 0
        self._dead = False

    def _note(self, offset: int, stream: int) -> None:
        if self._dead:
            return
        if self._count >= MAX_RECORDS - 1:
            stream = UNKNOWN  # the last record: unknown from here on
            self._dead = True
        try:
            if self._file is None:
                self._file = open(self._path, "ab", buffering=0)  # noqa: SIM115 - held
            # unbuffered: a reader sees each record as soon as the bytes it describes
            self._file.write(_RECORD.pack(offset, stream))
        except OSError as err:
            log.warning("cannot write the stream index %s: %s", self._path, err)
            self._dead = True
            return
        self._count += 1
        self._stream = stream

    def before_write(self, stream: int) -> None:
        """``stream``'s bytes are about to be appended to the log."""
        if self._dead:
            return
        try:
            self._pos = os.fstat(self._fd).st_size
        except OSError:
            self._dead = True
            return
        if self._end is not None and self._pos != self._end and self._stream != UNKNOWN:
            self._note(self._end, UNKNOWN)  # another writer's bytes in between
        if stream != self._stream or (self._end is not None and self._pos != self._end):
            self._note(self._pos, stream)

    def after_write(self, size: int) -> None:
        """``size`` bytes were appended."""
        self._end = self._pos + size

    def close(self) -> None:
        """The writer is done: what follows in the log is another's (stream unknown)."""
        if self._end is not None and self._stream != UNKNOWN:
            self._note(self._end, UNKNOWN)
        if self._file is not None:
            self._file.close()
            self._file = None
        self._dead = True


class StreamIndex:
    """The streams of one log's bytes; :meth:`stream_at` answers for a line's first byte,
    reading a block of records at a time (lines asked in order are cheapest)."""

    def __init__(self, log_path: Path) -> None:
        self._path = streams_path(log_path)
        try:
            self._count = os.stat(self._path).st_size // _RECORD.size
        except OSError:
            self._count = 0
        self._block_start, self._block = -1, list[tuple[int, int]]()
        # the run last answered: [start, end) and its stream (lines come in runs)
        self._run: tuple[int, int, str | None] = (0, -1, None)

    def _record(self, i: int) -> tuple[int, int]:
        if not self._block_start <= i < self._block_start + len(self._block):
            start = max(0, i - _BLOCK // 2)  # around i: lines are read forward and back
            try:
                with open(self._path, "rb") as f:
                    f.seek(start * _RECORD.size)
                    data = f.read(_BLOCK * _RECORD.size)
            except OSError:
                data = b""
            self._block_start = start
            self._block = [_RECORD.unpack_from(data, j)
                           for j in range(0, len(data) - _RECORD.size + 1, _RECORD.size)]
            if not self._block_start <= i < self._block_start + len(self._block):
                return (0, UNKNOWN)  # the index shrank under us (replaced): unknown
        return self._block[i - self._block_start]

    def stream_at(self, offset: int) -> str | None:
        """``"stdout"``, ``"stderr"`` or None (unknown) for the byte at ``offset``."""
        if self._count == 0:
            return None
        start, end, stream = self._run
        if start <= offset < end:
            return stream
        lo, hi = 0, self._count  # the last record starting at or before offset
        if self._block and self._block[0][0] <= offset:
            lo = self._block_start
            last = self._block_start + len(self._block)
            if last < self._count and self._block[-1][0] > offset:
                hi = last
        while lo < hi:
            mid = (lo + hi) // 2
            if self._record(mid)[0] <= offset:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            self._run = (0, self._record(0)[0], None)
            return None
        begin, code = self._record(lo - 1)
        stream = _NAMES.get(code)
        # the run ends where the next record starts (the last one: at the end of the log)
        self._run = (begin, self._record(lo)[0] if lo < self._count else 1 << 62, stream)
        return stream
