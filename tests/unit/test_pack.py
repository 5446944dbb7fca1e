"""The CLI packs a model directory into a temporary file, stopping at the master's limits
(issue 37): a huge directory costs neither its size in memory nor the time to compress it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from det_sdk.master.archive import (
    MAX_UNPACKED_BYTES,
    ArchiveTooLargeError,
    check_archive,
    pack,
)


def test_a_small_directory_packs_whole(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "train.py").write_text("print(1)")
    (tmp_path / "pkg" / "data.csv").write_text("1,2\n" * 100)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"x")
    names = [m.name for m in check_archive(pack(tmp_path))]
    assert names == ["pkg", "pkg/data.csv", "train.py"]


def test_packing_stops_as_soon_as_the_archive_passes_its_limit(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(os.urandom(4 << 20))  # does not compress
    with pytest.raises(ArchiveTooLargeError, match=r"packs to over 1048576 bytes") as err:
        pack(tmp_path, max_bytes=1 << 20)
    assert err.value.limit == 1 << 20


def test_a_file_over_the_unpacked_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    with open(tmp_path / "dataset.npy", "wb") as f:
        f.truncate(64 << 30)  # sparse: 64 GiB of zeros, which would take minutes to gzip
    start = time.monotonic()
    with pytest.raises(ArchiveTooLargeError,
                       match=rf"holds over {MAX_UNPACKED_BYTES} bytes of files \(at dataset"):
        pack(tmp_path)
    assert time.monotonic() - start < 5
