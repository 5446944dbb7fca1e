"""det_sdk.predictions: the part files, manifest and checks of a streamed predict (no
framework: the Keras loop's tests are tests/integration/test_predict_stream.py and, with
real processes killed, tests/e2e/test_predict_stream.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import det_sdk
from det_sdk.errors import DetSdkError
from det_sdk.predictions import (
    PartStore,
    PredictionsCorruptError,
    PredictionsIncompleteError,
    PredictionsMismatchError,
    StopAsked,
    load_predictions,
    part_stem,
)

FP = {"kind": "arrays", "rows": 10, "batch_size": 4, "digest": "abc"}
MODEL = {"class": "Functional", "weights": "123"}


def _batches() -> list[np.ndarray]:
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    return [x[0:4], x[4:8], x[8:10]]


def _write(path: Path, order: list[int], fp: dict = FP) -> PartStore:
    store = PartStore(path)
    store.begin(fp, MODEL)
    batches = _batches()
    for i in order:
        store.write_part(i, batches[i])
    return store


def test_parts_written_out_of_order_come_back_in_the_input_order(tmp_path: Path) -> None:
    store = _write(tmp_path, [2, 0, 1])
    manifest = store.finish(parts=3)
    assert [(p["start"], p["rows"]) for p in manifest["parts"]] == [(0, 4), (4, 4), (8, 2)]
    assert manifest["rows"] == 10 and manifest["complete"]
    expected = np.arange(40, dtype=np.float32).reshape(10, 4)
    got = det_sdk.load_predictions(tmp_path)
    assert got.dtype == np.float32 and np.array_equal(got, expected)
    mapped = load_predictions(tmp_path, mmap=True)
    assert isinstance(mapped, np.memmap) and np.array_equal(mapped, expected)
    assert (tmp_path / "combined-0.npy").exists()
    assert np.array_equal(load_predictions(tmp_path, mmap=True), expected)  # reuses it


def test_several_outputs_keep_their_names_and_kinds(tmp_path: Path) -> None:
    store = PartStore(tmp_path)
    store.begin(FP, MODEL)
    for i, (a, b) in enumerate([(0, 3), (3, 5)]):
        store.write_part(i, {"score": np.arange(a, b, dtype=np.float64)[:, None],
                             "label": np.arange(a, b, dtype=np.int32)})
    assert (tmp_path / f"{part_stem(1)}.npz").exists()
    store.finish(parts=2)
    got = load_predictions(tmp_path)
    assert list(got) == ["score", "label"]
    assert got["score"].shape == (5, 1) and got["label"].dtype == np.int32
    assert np.array_equal(got["label"], np.arange(5))
    assert np.array_equal(load_predictions(tmp_path, mmap=True)["score"], got["score"])


def test_complete_parts_verify_and_damaged_ones_are_written_again(tmp_path: Path) -> None:
    _write(tmp_path, [0, 1, 2])
    (tmp_path / f"{part_stem(2)}.json").unlink()  # killed between the part and its sidecar
    data = tmp_path / f"{part_stem(1)}.npy"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF  # same size, other bytes
    data.write_bytes(bytes(raw))
    again = PartStore(tmp_path)
    again.begin(FP, MODEL)
    assert again.complete_parts(range(3)) == {0}
    assert not data.exists()  # removed, to be written again
    with pytest.raises(PredictionsIncompleteError, match="part 1 of 3 is missing"):
        again.finish(parts=3)
    with pytest.raises(PredictionsIncompleteError, match="not complete"):
        load_predictions(tmp_path)


def test_begin_sweeps_a_killed_writers_temporary_files(tmp_path: Path) -> None:
    _write(tmp_path, [0])
    tmp = tmp_path / f".{part_stem(1)}.npy.123-abcd.tmp"
    tmp.write_bytes(b"half")
    PartStore(tmp_path).begin(FP, MODEL)
    assert not tmp.exists() and (tmp_path / f"{part_stem(0)}.npy").exists()


@pytest.mark.parametrize("fp, model, message", [
    ({**FP, "rows": 11}, MODEL, "input's length changed .* 10 rows then, 11 now"),
    ({**FP, "digest": "other"}, MODEL, "another input"),
    (FP, {**MODEL, "weights": "456"}, "another model"),
])
def test_another_jobs_directory_is_refused_naming_it(tmp_path: Path, fp: dict, model: dict,
                                                      message: str) -> None:
    _write(tmp_path, [0])
    with pytest.raises(PredictionsMismatchError, match=message) as err:
        PartStore(tmp_path).begin(fp, model)
    assert str(tmp_path) in str(err.value) and isinstance(err.value, DetSdkError)


def test_parts_without_a_manifest_are_refused(tmp_path: Path) -> None:
    _write(tmp_path, [0])
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(PredictionsMismatchError, match=r"no manifest\.json"):
        PartStore(tmp_path).begin(FP, MODEL)


def test_a_batch_of_another_shape_is_refused(tmp_path: Path) -> None:
    store = _write(tmp_path, [0])
    with pytest.raises(PredictionsCorruptError, match="batch 1's outputs are 0: float32\\(5,\\)"):
        store.write_part(1, np.zeros((4, 5), np.float32))
    later = PartStore(tmp_path)  # a rerun knows the structure from the parts on disk
    later.begin(FP, MODEL)
    with pytest.raises(PredictionsCorruptError):
        later.write_part(1, np.zeros((4, 4), np.float64))


def test_the_manifest_names_rows_structure_and_fingerprint(tmp_path: Path) -> None:
    _write(tmp_path, [0, 1, 2]).finish(parts=3)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["fingerprint"] == FP and manifest["model"] == MODEL
    assert manifest["structure"] == {"kind": "array", "leaves": [
        {"name": "0", "dtype": "<f4", "shape": [4]}]}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_not_a_predictions_directory(tmp_path: Path) -> None:
    with pytest.raises(PredictionsIncompleteError, match=r"no manifest\.json"):
        load_predictions(tmp_path)


class _Ranks:
    """Rank ``rank`` of ``size``; its allgather returns ``others`` with its own value at
    its rank (the other processes' values in a real collective), and counts its calls."""

    def __init__(self, rank: int, size: int, others: list) -> None:
        self.rank, self.size, self.is_chief, self.others = rank, size, rank == 0, others
        self.collectives = 0

    def allgather(self, value):
        self.collectives += 1
        return [value if r == self.rank else v for r, v in enumerate(self.others)]


class _Session:
    """A core context's ``preempt``: the master's answer, as this process knows it."""

    def __init__(self, asked: bool) -> None:
        self.asked = asked

    def requested(self) -> bool:
        return self.asked


def test_a_stop_asked_is_taken_after_every_step_alone_and_at_meetings_on_n_processes() -> None:
    alone = _Ranks(0, 1, [None])
    assert StopAsked(alone, _Session(False)).after(0) is False
    assert StopAsked(alone, _Session(True)).after(0) is True
    assert alone.collectives == 0
    # two processes: only every SYNC_STEPS steps, and on the chief's flag on both ranks
    chief = _Ranks(0, 2, [None, (False, False, None)])
    other = _Ranks(1, 2, [(True, False, None), None])
    for ranks, session in ((chief, _Session(True)), (other, _Session(False))):
        decisions = [StopAsked(ranks, session).after(s) for s in range(2 * StopAsked.SYNC_STEPS)]
        assert [s for s, d in enumerate(decisions) if d] == [9, 19]
        assert ranks.collectives == 2
    # a worker's own flag is not the decision (only the chief's, the same on every rank)
    assert StopAsked(_Ranks(1, 2, [(False, False, None), None]), _Session(True)).after(9) is False
    # a process that failed: every process ends at the next meeting (alone: at once)
    assert StopAsked(_Ranks(0, 2, [None, (False, True, None)]), _Session(False)).after(9) is True
    failed = StopAsked(_Ranks(1, 2, [(False, False, None), None]), _Session(False))
    assert [failed.after(s, failed=True) for s in (7, 8, 9)] == [False, False, True]
    assert StopAsked(alone, _Session(False)).after(3, failed=True) is True

    # what each process brings to a meeting comes back to all, by rank (the Keras front's
    # parts done)
    carrying = StopAsked(_Ranks(0, 2, [None, (False, False, 7)]), _Session(False))
    assert carrying.after(9, carry=5) is False and carrying.carried == [5, 7]


def test_a_url_output_is_a_bucket_never_a_folder(tmp_path: Path, monkeypatch) -> None:
    """``output=`` as a URL picks the bucket's store (credentials from the run's
    checkpoint storage when it is the same bucket); a Path of a URL, which has lost a
    slash, is the URL; another scheme or no bucket is refused naming output=."""
    pytest.importorskip("obstore")
    from types import SimpleNamespace

    from det_sdk.errors import UsageError
    from det_sdk.predictions import output_store, output_url
    from det_sdk.predictions_buckets import BucketPartStore
    from det_sdk.storage.s3 import S3Storage

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    assert output_url("s3://preds/a/b/") == "s3://preds/a/b"
    assert output_url(Path("gs://preds/a")) == "gs://preds/a"
    assert output_url("az://c") == "az://c" and output_url("out/s3:") is None
    for bad, said in (("http://host/x", "not a path nor an s3://"),
                      ("s3://", "names no bucket")):
        with pytest.raises(UsageError, match=f"output={bad!r}.*{said}"):
            output_url(bad)
    ckpts = S3Storage("preds", "ckpts", endpoint_url="http://127.0.0.1:1",
                      access_key="AK", secret_key="SK")
    core = SimpleNamespace(files_dir=None, local_run_dir=tmp_path,
                           checkpoint=SimpleNamespace(storage=ckpts))
    store = output_store(core, Path("s3://preds/job"))
    assert isinstance(store, BucketPartStore) and store.location == "s3://preds/job"
    assert store.storage.describe() == "s3://preds/job"
    assert store.storage.endpoint_url == "http://127.0.0.1:1"  # the checkpoints' client
    other = output_store(core, "s3://elsewhere/job")  # another bucket: the environment's
    assert other.storage.endpoint_url == "http://127.0.0.1:2"
    assert other.storage.describe() == "s3://elsewhere/job"
    assert list(tmp_path.iterdir()) == []  # nothing local: no "s3:" folder
