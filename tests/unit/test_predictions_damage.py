"""Issue 46: predictions' files are data, checked whenever they are read. A flipped bit in a
finished part is refused naming the part (memory-mapped reads too) and the job's rerun
writes it again; a damaged sidecar or manifest is a damaged part (or a clear refusal),
never a crash, never a file deleted outside the directory; a second run is refused while
another holds the directory's lock, and sweeps nothing of it.

A run "in another process" holds the lock through its own open file description of the
lock file (flock locks conflict between descriptions, within one process too)."""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from det_sdk.errors import DetSdkError
from det_sdk.predictions import (
    LOCK,
    PartStore,
    PredictionsBusyError,
    PredictionsCorruptError,
    load_predictions,
    open_store,
    part_stem,
)

FP = {"kind": "arrays", "rows": 10, "batch_size": 4, "digest": "abc"}
MODEL = {"class": "Functional", "weights": "123"}
X = np.arange(40, dtype=np.float32).reshape(10, 4)
BATCHES = [X[0:4], X[4:8], X[8:10]]


def _run(path: Path, multi: bool = False) -> PartStore:
    """One whole run: begin, the parts no earlier run completed, finish."""
    store = PartStore(path)
    store.begin(FP, MODEL)
    done = store.complete_parts(range(3))
    for i in sorted(set(range(3)) - done):
        store.write_part(i, {"a": BATCHES[i], "b": BATCHES[i][:, 0]} if multi else BATCHES[i])
    store.finish(parts=3)
    return store


def _flip_bit(path: Path, offset_from_end: int = 3) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("mmap", [False, True])
def test_a_flipped_bit_is_refused_naming_the_part_and_the_rerun_rewrites_it(
        tmp_path: Path, mmap: bool) -> None:
    _run(tmp_path)
    part = tmp_path / f"{part_stem(1)}.npy"
    _flip_bit(part)
    with pytest.raises(PredictionsCorruptError, match=rf"part 1 \({part}\) is damaged.*digest"):
        load_predictions(tmp_path, mmap=mmap)
    assert not (tmp_path / "combined-0.npy").exists()  # nothing made from a damaged part
    _run(tmp_path)  # the job again: part 1 found damaged by its sidecar, written again
    assert np.array_equal(load_predictions(tmp_path, mmap=mmap), X)


def test_a_damaged_combined_file_is_made_again_from_the_parts(tmp_path: Path) -> None:
    _run(tmp_path)
    assert np.array_equal(load_predictions(tmp_path, mmap=True), X)
    _flip_bit(tmp_path / "combined-0.npy")
    got = load_predictions(tmp_path, mmap=True)
    assert isinstance(got, np.memmap) and np.array_equal(got, X)
    # a part damaged after the combined file was made: the next mapped read says so
    _flip_bit(tmp_path / f"{part_stem(0)}.npy")
    _flip_bit(tmp_path / "combined-0.npy")
    with pytest.raises(PredictionsCorruptError, match="part 0"):
        load_predictions(tmp_path, mmap=True)


def test_a_damaged_npz_part_is_refused_not_a_zip_error(tmp_path: Path) -> None:
    _run(tmp_path, multi=True)
    part = tmp_path / f"{part_stem(2)}.npz"
    part.write_bytes(part.read_bytes()[:40].ljust(part.stat().st_size, b"\0"))  # same size
    with pytest.raises(PredictionsCorruptError, match=r"part 2.*unreadable"):
        load_predictions(tmp_path)
    _run(tmp_path, multi=True)
    got = load_predictions(tmp_path)
    assert np.array_equal(got["a"], X) and np.array_equal(got["b"], X[:, 0])


@pytest.mark.parametrize("damage", ["not json", "not an object", "missing keys",
                                    "another part's file", "outside file", "bad structure"])
def test_a_damaged_sidecar_is_a_damaged_part_written_again(tmp_path: Path, damage: str
                                                            ) -> None:
    _run(tmp_path)
    outside = tmp_path.parent / f"{tmp_path.name}-victim.txt"
    outside.write_text("not the job's")
    sidecar = tmp_path / f"{part_stem(1)}.json"
    meta = json.loads(sidecar.read_text())
    if damage == "not json":
        sidecar.write_bytes(b"\x00{garbage")
    elif damage == "not an object":
        sidecar.write_text("[1, 2]")
    elif damage == "missing keys":
        sidecar.write_text(json.dumps({"index": 1}))
    elif damage == "another part's file":  # part 1's data gone, its sidecar names part 0's
        (tmp_path / meta["file"]).unlink()
        first = json.loads((tmp_path / f"{part_stem(0)}.json").read_text())
        sidecar.write_text(json.dumps({**first, "index": 1}))
    elif damage == "outside file":
        sidecar.write_text(json.dumps({**meta, "file": f"../{outside.name}"}))
    else:
        sidecar.write_text(json.dumps({**meta, "structure": {"kind": "array"}}))
    store = PartStore(tmp_path)
    store.begin(FP, MODEL)
    assert store.complete_parts(range(3)) == {0, 2}  # part 1 is written again
    assert outside.read_text() == "not the job's"  # nothing outside the directory goes
    store.write_part(1, BATCHES[1])
    store.finish(parts=3)
    assert np.array_equal(load_predictions(tmp_path), X)


def test_a_damaged_manifest_is_refused_naming_it(tmp_path: Path) -> None:
    _run(tmp_path)
    manifest = tmp_path / "manifest.json"
    good = json.loads(manifest.read_text())
    for bad in (b"{", b"[]", json.dumps({**good, "parts": good["parts"][:2]}).encode(),
                json.dumps({**good, "parts": [{**good["parts"][0], "file": "/etc/passwd"},
                                              *good["parts"][1:]]}).encode()):
        manifest.write_bytes(bad)
        with pytest.raises(PredictionsCorruptError, match=r"manifest\.json is damaged"):
            load_predictions(tmp_path)
        with pytest.raises(DetSdkError, match=r"manifest\.json is damaged"):
            PartStore(tmp_path).begin(FP, MODEL)


def test_a_second_run_is_refused_while_another_holds_the_directory(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    fd = os.open(tmp_path / LOCK, os.O_RDWR | os.O_CREAT)  # the other run's lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"process 4242 on gpu-7\n")
        # the other run's part being written: never swept from under it
        tmp = tmp_path / f".{part_stem(0)}.npy.4242-abcd.tmp"
        tmp.write_bytes(b"half a part")
        (tmp_path / "manifest.json").write_text(json.dumps(
            {"format": 1, "complete": False, "fingerprint": FP, "model": MODEL}))
        with pytest.raises(PredictionsBusyError, match="process 4242 on gpu-7"):
            PartStore(tmp_path).begin(FP, MODEL)
        assert tmp.read_bytes() == b"half a part"
    finally:
        os.close(fd)  # the other run ends (or dies): its lock goes with it
    _run(tmp_path)  # now it may, and sweeps what the dead run left
    assert not tmp.exists() and not (tmp_path / LOCK).exists()
    assert np.array_equal(load_predictions(tmp_path), X)


class _ThreadRank:
    """One of two ranks on threads: the chief's broadcast reaches the other (a barrier)."""

    shared: dict[str, object] = {}

    def __init__(self, rank: int, barrier: threading.Barrier) -> None:
        self.rank, self.size, self.is_chief, self.barrier = rank, 2, rank == 0, barrier

    def broadcast(self, value: object) -> object:
        if self.is_chief:
            self.shared["value"] = value
        self.barrier.wait(timeout=10)
        return self.shared["value"]


def _both_ranks_open(path: Path) -> list[BaseException | None]:
    barrier, out = threading.Barrier(2), [None, None]

    def rank(r: int) -> None:
        try:
            open_store(_ThreadRank(r, barrier), PartStore(path), FP, MODEL)
        except BaseException as err:  # the rank's own refusal
            out[r] = err

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert not any(t.is_alive() for t in threads), "a rank waits for the other"
    return out  # type: ignore[return-value]


def test_every_rank_gets_the_chief_s_refusal_never_a_wait(tmp_path: Path) -> None:
    _run(tmp_path)
    (tmp_path / "manifest.json").write_bytes(b"{")
    errors = _both_ranks_open(tmp_path)
    assert all(isinstance(e, PredictionsCorruptError) and "manifest.json is damaged" in str(e)
               for e in errors), errors
    other = tmp_path.parent / f"{tmp_path.name}-busy"
    other.mkdir()
    fd = os.open(other / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        errors = _both_ranks_open(other)
        assert all(isinstance(e, PredictionsBusyError) for e in errors), errors
    finally:
        os.close(fd)
