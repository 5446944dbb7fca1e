"""det_sdk.arrayfile: arrays written back to back, the large ones straight from memory.

Real files on the test's temporary directory (this machine's ext4 and tmpfs both
take ``O_DIRECT``). What matters to a checkpoint: every array reads back bit for
bit at the offset returned, offsets keep the requested alignment, the checksum is
the file's, and the large arrays really bypass the page cache.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import xxhash

from det_sdk import arrayfile
from det_sdk.arrayfile import BLOCK, MIN_DIRECT, ArrayFileWriter


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
    with pytest.raises(OSError, match="wrote nothing"), \
            ArrayFileWriter(tmp_path / "state.bin") as out:
        out.add(_page_aligned(2 * MIN_DIRECT))
