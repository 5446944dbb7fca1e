"""det_sdk.arrayfile: arrays written back to back, the large ones straight from memory.

Real files on the test's temporary directory (this machine's ext4 and tmpfs both
take ``O_DIRECT``). What matters to a checkpoint: every array reads back bit for
bit at the offset returned, offsets keep the requested alignment, the checksum is
the file's, and the large arrays really bypass the page cache.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xxhash

from det_sdk import arrayfile
from det_sdk.arrayfile import BLOCK, MIN_DIRECT, ArrayFileWriter, copy_file, read_exactly, write_all
from det_sdk.errors import CheckpointCorruptError, CheckpointWriteError, DetSdkError


def _page_aligned(nbytes: int, shift: int = 0) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose address is ``shift`` past a block boundary."""
    raw = np.empty(nbytes + 2 * BLOCK, dtype=np.uint8)
    start = -raw.ctypes.data % BLOCK + shift
    return raw[start:start + nbytes]


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    big = _page_aligned(3_000_000, shift=64).view(np.float32)  # 64-aligned, not page-aligned
    big[:] = rng.standard_normal(big.size).astype(np.float32)
    aligned = _page_aligned(2 << 20).view(np.int64)  # page-aligned: all of it direct
    aligned[:] = rng.integers(-(2**40), 2**40, size=aligned.size)
    return [
        np.array(3.5),  # 0-d
        np.arange(7, dtype=np.int16),  # small: buffered
        np.arange(5000, dtype=np.float64),  # under MIN_DIRECT: buffered
        big.reshape(-1, 3)[:, :],  # large, its tail not a whole block
        np.zeros((0, 4), np.float32),  # empty
        aligned,
        np.array([True, False, True]),
    ]


def _read_back(path: Path, arrays: list[np.ndarray], offsets: list[int]) -> list[np.ndarray]:
    data = path.read_bytes()
    return [np.frombuffer(data, a.dtype, count=a.size, offset=o).reshape(a.shape)
            for a, o in zip(arrays, offsets)]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_arrays_read_back_at_their_offsets_with_the_files_checksum(
        tmp_path: Path, direct: bool) -> None:
    arrays = _arrays()
    path = tmp_path / "state.bin"
    with ArrayFileWriter(path, align=64, direct=direct) as out:
        offsets = [out.add(a) for a in arrays]
    assert path.stat().st_size == out.total
    assert all(o % 64 == 0 for o in offsets), offsets
    assert offsets == sorted(offsets)
    for want, got in zip(arrays, _read_back(path, arrays, offsets)):
        assert got.shape == want.shape and np.array_equal(got, want)
    assert out.digest.hexdigest() == xxhash.xxh3_64_hexdigest(path.read_bytes())
    if direct:
        # the two large arrays went straight from memory, all but their partial blocks
        assert out.direct_bytes >= arrays[5].nbytes + arrays[3].nbytes - 2 * BLOCK
    else:
        assert out.direct_bytes == 0


def test_a_large_array_lies_at_an_offset_congruent_with_its_address(tmp_path: Path) -> None:
    arr = _page_aligned(MIN_DIRECT + 100, shift=192)
    arr[:] = 7
    with ArrayFileWriter(tmp_path / "a.bin") as out:
        out.add(np.ones(3, np.float32))
        offset = out.add(arr)
    assert offset % BLOCK == arr.ctypes.data % BLOCK == 192
    assert out.direct_bytes == MIN_DIRECT - BLOCK  # the whole blocks between its ragged ends


def test_a_filesystem_that_refuses_the_direct_write_gets_it_buffered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Test double at the kernel boundary: every filesystem on this machine takes
    # O_DIRECT, so a refusal (EINVAL, as some network filesystems answer) is simulated
    # on the direct descriptor only; the bytes must still all land, buffered.
    real_pwrite = os.pwrite
    direct_fds: set[int] = set()
    real_open = os.open

    def tracking_open(path: object, flags: int, *args: object) -> int:
        fd = real_open(path, flags, *args)
        if flags & getattr(os, "O_DIRECT", 0):
            direct_fds.add(fd)
        return fd

    def refusing_pwrite(fd: int, data: object, offset: int) -> int:
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(arrayfile.os, "open", tracking_open)
    monkeypatch.setattr(arrayfile.os, "pwrite", refusing_pwrite)
    arrays = _arrays()
    path = tmp_path / "state.bin"
    with ArrayFileWriter(path) as out:
        offsets = [out.add(a) for a in arrays]
    monkeypatch.undo()
    assert out.direct_bytes == 0
    for want, got in zip(arrays, _read_back(path, arrays, offsets)):
        assert np.array_equal(got, want)
    assert out.digest.hexdigest() == xxhash.xxh3_64_hexdigest(path.read_bytes())


def test_a_write_error_other_than_alignment_is_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Same boundary: a full disk (ENOSPC) cannot be made on demand here.
    def full(fd: int, data: object, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(arrayfile.os, "pwrite", full)
    with pytest.raises(OSError, match="No space left"), \
            ArrayFileWriter(tmp_path / "state.bin") as out:
        out.add(_page_aligned(2 * MIN_DIRECT))


def test_a_write_that_makes_no_progress_raises_instead_of_looping(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Same boundary: a write(2) that returns 0 for a regular file cannot be provoked here.
    monkeypatch.setattr(arrayfile.os, "pwrite", lambda fd, data, offset: 0)
    with pytest.raises(CheckpointWriteError, match=r"wrote 0 of \d+ bytes at offset 0"), \
            ArrayFileWriter(tmp_path / "state.bin") as out:
        out.add(_page_aligned(2 * MIN_DIRECT))


# --- read_exactly / write_all / copy_file: every byte, or how many were missing ----------


def _trickle(fd: int, data: bytes, chunk: int, close: bool = True) -> threading.Thread:
    """Write ``data`` to ``fd`` in ``chunk``-byte writes with pauses: the reader's
    reads come back short (a pipe returns what is there)."""
    def run() -> None:
        try:
            for i in range(0, len(data), chunk):
                os.write(fd, data[i:i + chunk])
                if i // chunk % 16 == 0:
                    time.sleep(0.001)
        finally:
            if close:
                os.close(fd)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _short_reads_seen(fd: int, size: int) -> int:
    """How many bytes one read of ``size`` gets here (what read_exactly must repeat)."""
    return len(os.read(fd, size))


def test_read_exactly_fills_the_buffer_from_a_pipe_of_short_reads() -> None:
    data = np.random.default_rng(1).integers(0, 256, 3_000_001, dtype=np.uint8).tobytes()
    r, w = os.pipe()
    writer = _trickle(w, data, chunk=1000)
    try:
        # a single read of this pipe really is short: the case being fixed
        first = _short_reads_seen(r, len(data))
        assert 0 < first < len(data)
        buf = np.empty(len(data) - first, np.uint8)  # a numpy buffer, as the reader uses
        read_exactly(r, buf, what="the pipe")
        assert data[:first] + buf.tobytes() == data
    finally:
        writer.join()
        os.close(r)


def test_read_exactly_from_a_file_object_of_short_reads() -> None:
    data = os.urandom(1_000_003)
    a, b = socket.socketpair()
    writer = _trickle(os.dup(b.fileno()), data, chunk=4096)
    b.close()
    try:
        with a.makefile("rb", buffering=0) as f:
            buf = bytearray(len(data))
            read_exactly(f, buf)
        assert bytes(buf) == data
    finally:
        writer.join()
        a.close()


def test_read_exactly_says_how_many_bytes_it_expected_when_the_source_ends() -> None:
    r, w = os.pipe()
    writer = _trickle(w, b"x" * 70_000, chunk=700)
    try:
        with pytest.raises(CheckpointCorruptError,
                           match=r"^the pipe ended early: expected 100000 bytes, got 70000$"):
            read_exactly(r, memoryview(bytearray(100_000)), what="the pipe")
    finally:
        writer.join()
        os.close(r)


def test_read_exactly_at_an_offset_of_a_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "state.bin"
    path.write_bytes(bytes(range(256)) * 40)  # 10240 bytes
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(100)
        read_exactly(fd, buf, offset=1000)
        assert bytes(buf) == (bytes(range(256)) * 40)[1000:1100]
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # pread: the position is left alone
        with pytest.raises(CheckpointCorruptError) as err:
            read_exactly(fd, bytearray(5000), offset=8192, what="state.bin")
        assert str(err.value) == ("state.bin ended early: expected 5000 bytes from offset "
                                  "8192, got 2048")
        assert isinstance(err.value, DetSdkError)
    finally:
        os.close(fd)


def test_read_exactly_refuses_a_read_only_buffer() -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(TypeError, match="writable"):
            read_exactly(r, b"12345")
    finally:
        os.close(r)
        os.close(w)


def test_write_all_writes_every_byte_into_a_pipe_read_in_small_pieces() -> None:
    data = os.urandom(1 << 20)  # far over a pipe's 64 KiB buffer
    r, w = os.pipe()
    got = bytearray()

    def drain() -> None:
        while chunk := os.read(r, 777):
            got.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        write_all(w, np.frombuffer(data, np.uint8))
    finally:
        os.close(w)
        reader.join()
        os.close(r)
    assert bytes(got) == data


def test_copy_file_copies_bytes_and_mode_across_chunks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrayfile, "COPY_CHUNK", 4096)  # many chunks, one ragged
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    data = os.urandom(5 * 4096 + 123)
    src.write_bytes(data)
    src.chmod(0o600)
    assert copy_file(src, dst) == str(dst)
    assert dst.read_bytes() == data
    assert dst.stat().st_mode & 0o777 == 0o600
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    copy_file(empty, tmp_path / "empty2")
    assert (tmp_path / "empty2").read_bytes() == b""
