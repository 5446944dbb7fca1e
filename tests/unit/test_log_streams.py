"""The stream index of a one-process task's log (det_sdk.log_streams): runs noted where
the stream changes, another writer's bytes unknown, bounded, a missing index unknown."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pytest

from det_sdk import log_streams
from det_sdk.log_streams import STDERR, STDOUT, StreamIndex, StreamIndexWriter, streams_path


def _write(f: BinaryIO, writer: StreamIndexWriter, stream: int, data: bytes) -> None:
    writer.before_write(stream)
    f.write(data)
    f.flush()
    writer.after_write(len(data))


def test_runs_and_another_writers_bytes(tmp_path: Path) -> None:
    log = tmp_path / "logs.txt"
    with open(log, "ab") as f:
        w = StreamIndexWriter(streams_path(log), f.fileno())
        _write(f, w, STDOUT, b"o1\n")
        _write(f, w, STDOUT, b"o2\n")  # the same run: no record
        _write(f, w, STDERR, b"e1\n")
        with open(log, "ab") as other:
            other.write(b"det_sdk: a note\n")
        _write(f, w, STDERR, b"e2\n")
        w.close()
    with open(log, "ab") as f:
        f.write(b"after\n")
    assert streams_path(log).stat().st_size == 5 * 9  # o, e, unknown, e, unknown
    data = log.read_bytes()
    index = StreamIndex(log)
    starts = [i for i in range(len(data)) if i == 0 or data[i - 1] == 10]
    streams = [(data[s:data.index(b"\n", s)], index.stream_at(s)) for s in starts]
    assert streams == [(b"o1", "stdout"), (b"o2", "stdout"), (b"e1", "stderr"),
                       (b"det_sdk: a note", None), (b"e2", "stderr"), (b"after", None)]
    # asked backwards (a --tail), the same answers
    assert [index.stream_at(s) for s in reversed(starts)] == [v for _, v in reversed(streams)]


def test_bounded_then_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_streams, "MAX_RECORDS", 4)
    log = tmp_path / "logs.txt"
    with open(log, "ab") as f:
        w = StreamIndexWriter(streams_path(log), f.fileno())
        for i in range(50):
            _write(f, w, STDOUT if i % 2 == 0 else STDERR, b"x\n")
    assert streams_path(log).stat().st_size == 4 * 9
    index = StreamIndex(log)
    assert [index.stream_at(2 * i) for i in range(5)] == ["stdout", "stderr", "stdout", None,
                                                          None]
    assert index.stream_at(98) is None


def test_many_records_are_searched(tmp_path: Path) -> None:
    """More records than one block: a binary search, forward and back."""
    log = tmp_path / "logs.txt"
    with open(log, "ab") as f:
        w = StreamIndexWriter(streams_path(log), f.fileno())
        for i in range(3000):
            _write(f, w, STDOUT if i % 2 == 0 else STDERR, b"y\n")
    index = StreamIndex(log)
    want = ["stdout" if i % 2 == 0 else "stderr" for i in range(3000)]
    assert [index.stream_at(2 * i + 1) for i in range(3000)] == want
    assert [index.stream_at(2 * i) for i in reversed(range(3000))] == want[::-1]
    assert [index.stream_at(2 * i) for i in (2999, 5, 1500, 0, 2048)] == [
        want[i] for i in (2999, 5, 1500, 0, 2048)]


def test_no_index_and_an_unwritable_one(tmp_path: Path) -> None:
    log = tmp_path / "logs.txt"
    log.write_bytes(b"a\n")
    assert StreamIndex(log).stream_at(0) is None
    with open(log, "ab") as f:  # the index's directory is gone: the log is still written
        w = StreamIndexWriter(tmp_path / "gone" / "logs.txt.streams", f.fileno())
        _write(f, w, STDERR, b"b\n")
    assert log.read_bytes() == b"a\nb\n"
