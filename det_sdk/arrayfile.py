"""Arrays written back to back into one file, the large ones straight from their memory.

A buffered ``write`` copies every byte into the page cache, and the kernel writes
the cache back later. On a machine whose cores are busy training, those copies
take from training: a background checkpoint of 572 MiB beside the training steps of
a 50M-parameter model on this project's 2-core VM cost training 1.08x a raw
write+fsync of the same bytes, and took 2.2 to 2.8 s. Written with ``O_DIRECT``,
the bytes go from the arrays' own memory to the disk: 0.27x, in 0.4 to 0.5 s
(``scripts/bench/bench_checkpoint.py``). ``O_DIRECT`` needs the memory, the file offset
and the length aligned to the disk's block, so each array of :data:`MIN_DIRECT`
bytes or more is placed in the file at an offset congruent to its address modulo
:data:`BLOCK`: everything but its first and last partial blocks goes direct.
Those, and smaller arrays, go through the page cache as usual. A filesystem
without ``O_DIRECT`` (or a platform without it) gets every byte buffered, the
same file.

Every read and write of a checkpoint file goes through :func:`read_exactly` and
:func:`write_all` (and copies through :func:`copy_file`, built on both): one system
call moves at most 2,147,479,552 bytes on Linux, and a pipe or a network filesystem
may move fewer, so each loops until done and says how many bytes it expected when
the file ends first.

The offsets therefore depend on where the arrays lie in memory; the caller keeps
the index (:meth:`ArrayFileWriter.add` returns each offset). Every offset is a
multiple of ``align``, so a reader can use the arrays in place.

>>> import numpy as np, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "state.bin")
>>> with ArrayFileWriter(path) as w:
...     offsets = [w.add(np.arange(3, dtype=np.int64)), w.add(np.ones(2, np.float32))]
>>> offsets, w.total
([0, 64], 72)
"""

from __future__ import annotations

import errno
import os
import shutil
from types import TracebackType
from typing import Any, Protocol

import numpy as np
import xxhash

from det_sdk.errors import (
    ArgumentTypeError,
    CheckpointCorruptError,
    CheckpointWriteError,
    DetSdkError,
)

__all__ = ["BLOCK", "COPY_CHUNK", "MIN_DIRECT", "ArrayFileWriter", "copy_file", "read_exactly",
           "write_all"]

BLOCK = 4096  # O_DIRECT alignment that fits disks of 512- and 4096-byte sectors
# A direct write waits for the disk; a buffered one returns at once and its data goes
# out with the file's fsync. Small arrays, which cost the page cache little, go buffered.
MIN_DIRECT = 1 << 20
COPY_CHUNK = 8 << 20  # bytes per read/write of copy_file


class NonBlockingFileError(DetSdkError, BlockingIOError):
    """A non-blocking file given to read from: it may have no data yet; pass a blocking one."""


def _byte_view(buf: Any) -> memoryview:
    """``buf`` (bytes-like, or a C-contiguous numpy array) as a flat memoryview of bytes."""
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class SupportsReadinto(Protocol):
    """A binary file object read_exactly fills a buffer from (``io.BufferedReader``,
    ``io.FileIO``, a socket's ``makefile("rb")``); ``None``: non-blocking, nothing yet."""

    def readinto(self, buffer: Any, /) -> int | None: ...


def read_exactly(src: int | SupportsReadinto, buf: Any, offset: int | None = None,
                 what: str = "file") -> None:
    """Fill ``buf`` (a writable bytes-like object: memoryview, bytearray, numpy array)
    from ``src`` (a file descriptor or a binary file opened for reading), looping until
    every byte is in.

    With ``offset`` (descriptors only) the bytes are read from that position of the
    file (``pread``) and the descriptor's own position is left alone; without, from
    where the descriptor or file is. A single read returns at most 2,147,479,552 bytes
    on Linux, and fewer from a pipe or a network filesystem: this is the one place
    checkpoint bytes are read, so none is left out. A file that ends first raises
    :class:`~det_sdk.errors.CheckpointCorruptError` saying how many bytes ``what``
    was expected to hold there and how many it gave.

    >>> r, w = os.pipe(); _ = os.write(w, b"abc"); os.close(w)
    >>> read_exactly(r, bytearray(5), what="the pipe")
    Traceback (most recent call last):
    ...
    det_sdk.errors.CheckpointCorruptError: the pipe ended early: expected 5 bytes, got 3
    >>> os.close(r)
    """
    view = _byte_view(buf)
    if view.readonly:
        raise ArgumentTypeError("read_exactly: buf must be writable, got a read-only "
                                f"{type(buf).__name__}")
    expected, got = len(view), 0
    if offset is not None and not isinstance(src, int):
        raise ArgumentTypeError("read_exactly: offset needs a file descriptor, not a file object")
    while got < expected:
        rest = view[got:]
        n: int | None
        if isinstance(src, int) and offset is not None:
            n = os.preadv(src, [rest], offset + got)
        elif isinstance(src, int):
            n = os.readv(src, [rest])
        else:
            n = src.readinto(rest)
            if n is None:  # a non-blocking file with nothing to read yet
                raise NonBlockingFileError(errno.EAGAIN, f"read_exactly: {what} is "
                                           "non-blocking and has no data; pass a blocking file")
        if n == 0:
            start = f" from offset {offset}" if offset is not None else ""
            raise CheckpointCorruptError(
                f"{what} ended early: expected {expected} bytes{start}, got {got}")
        got += n


def write_all(fd: int, data: Any, offset: int | None = None, what: str = "file") -> None:
    """Write every byte of ``data`` (bytes-like, or a C-contiguous numpy array) to the
    file descriptor ``fd``, at ``offset`` (``pwrite``) or at its position, looping until
    done: one write takes at most 2,147,479,552 bytes on Linux, fewer on a full pipe.
    A write that makes no progress raises :class:`~det_sdk.errors.CheckpointWriteError`
    saying how many bytes were expected and how many went out (a full disk raises its
    own ``OSError``, ENOSPC, from the write itself)."""
    view = _byte_view(data)
    expected, done = len(view), 0
    while done < expected:
        rest = view[done:]
        n = os.pwrite(fd, rest, offset + done) if offset is not None else os.write(fd, rest)
        if n <= 0:  # never loop on a write that makes no progress
            at = f" at offset {offset}" if offset is not None else ""
            raise CheckpointWriteError(
                errno.EIO, f"{what}: wrote {done} of {expected} bytes{at}, then nothing")
        done += n


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> str:
    """Copy the file ``src`` to ``dst`` (its bytes and permission bits), checked to be
    the size ``src`` had when opened; ``dst``. A ``shutil.copytree`` ``copy_function``:
    how checkpoints are uploaded to and downloaded from storage.

    A source that shrinks while it is copied (another process truncating it) raises
    :class:`~det_sdk.errors.CheckpointCorruptError` with the sizes, not a short copy.
    """
    fin = os.open(src, os.O_RDONLY)
    try:
        size = os.fstat(fin).st_size
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            chunk = memoryview(bytearray(min(size, COPY_CHUNK)))
            done = 0
            while done < size:
                part = chunk[:min(COPY_CHUNK, size - done)]
                read_exactly(fin, part, offset=done, what=f"{os.fspath(src)} "
                             f"({size} bytes when the copy began)")
                write_all(fout, part, offset=done, what=os.fspath(dst))
                done += len(part)
        finally:
            os.close(fout)
    finally:
        os.close(fin)
    shutil.copymode(src, dst)
    return os.fspath(dst)


class ArrayFileWriter:
    """Writes arrays into a new file at increasing offsets, and checksums its content.

    ``digest`` is the xxh3-64 of the whole file as written (gaps between arrays
    are zeros), ``total`` its size. ``direct=False`` writes every byte through
    the page cache. Close it (or use it as a context manager) before the file is
    fsynced and published; the caller does that.
    """

    def __init__(self, path: str | os.PathLike[str], align: int = 64, direct: bool = True
                 ) -> None:
        self.align = align
        self.total = 0  # end of the last array: the file's size once closed
        self.digest = xxhash.xxh3_64()
        self.direct_bytes = 0  # how many bytes went straight from memory to the disk
        self.path = os.fspath(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._direct_fd: int | None = None
        # opened at the first array large enough (a small model's file never needs it)
        self._direct_flag = getattr(os, "O_DIRECT", 0) if direct else 0

    def add(self, arr: np.ndarray) -> int:
        """Append ``arr``'s bytes (C-contiguous); the offset they start at."""
        data = arr.reshape(-1).view(np.uint8).data  # a byte view, empty arrays too
        addr = arr.ctypes.data
        if self._direct_flag and len(data) >= MIN_DIRECT:
            self._open_direct()
        direct = (self._direct_fd is not None and len(data) >= MIN_DIRECT
                  and addr % self.align == 0)
        if direct:  # offset congruent with the address: whole blocks line up
            offset = self.total + (addr - self.total) % BLOCK
        else:
            offset = self.total + -self.total % self.align
        if offset > self.total:
            self.digest.update(bytes(offset - self.total))  # a hole reads as zeros
        self.digest.update(data)
        if direct:
            head = -addr % BLOCK
            body = (len(data) - head) // BLOCK * BLOCK
            self._buffered(data[:head], offset)
            self._direct(data[head:head + body], offset + head)
            self._buffered(data[head + body:], offset + head + body)
        else:
            self._buffered(data, offset)
        self.total = offset + len(data)
        return offset

    def _open_direct(self) -> None:
        flag, self._direct_flag = self._direct_flag, 0  # one try
        try:
            self._direct_fd = os.open(self.path, os.O_WRONLY | flag)
        except OSError:  # tmpfs on older kernels, some network filesystems
            self._direct_fd = None

    def _buffered(self, data: memoryview, offset: int) -> None:
        write_all(self._fd, data, offset, what=self.path)

    def _direct(self, data: memoryview, offset: int) -> None:
        while data and self._direct_fd is not None:
            try:
                n = os.pwrite(self._direct_fd, data, offset)
            except OSError as err:
                if err.errno != errno.EINVAL:
                    raise
                # the filesystem wants another alignment, or no direct I/O at all
                os.close(self._direct_fd)
                self._direct_fd = None
                break
            n -= n % BLOCK  # a short direct write that ends off a block: finish buffered
            if n <= 0:
                break
            self.direct_bytes += n
            data, offset = data[n:], offset + n
        self._buffered(data, offset)

    def close(self) -> None:
        """Make the file exactly ``total`` bytes long and close it."""
        if self._fd < 0:
            return
        try:
            os.ftruncate(self._fd, self.total)  # an empty last array ends in a hole
        finally:
            os.close(self._fd)
            self._fd = -1
            if self._direct_fd is not None:
                os.close(self._direct_fd)
                self._direct_fd = None

    def __enter__(self) -> ArrayFileWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
