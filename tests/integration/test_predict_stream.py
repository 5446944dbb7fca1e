"""``context.predict(..., output=DIR)`` in this process: every data kind streams the rows
``model.predict`` returns, in order; a failure leaves valid parts that a rerun completes;
another job's directory and a model whose outputs change shape are refused; a full disk
(a real 1 MiB tmpfs) is a clear error and a rerun completes.
(Processes killed for real: tests/e2e/test_predict_stream.py.)"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.errors import DetSdkError, UsageError  # noqa: E402
from det_sdk.predictions import (  # noqa: E402
    PartStore,
    PredictionsCorruptError,
    PredictionsDiskFullError,
    PredictionsIncompleteError,
    PredictionsMismatchError,
)

ROWS, BATCH = 103, 10


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    ctx = det.keras.init(runs_dir=tmp_path_factory.mktemp("runs"), seed=3)
    x = np.random.default_rng(0).normal(size=(ROWS, 4)).astype("float32")
    inp = tf.keras.Input((4,))
    hidden = tf.keras.layers.Dense(5, activation="relu")(inp)
    model = tf.keras.Model(inp, tf.keras.layers.Dense(2)(hidden))
    multi = tf.keras.Model(inp, {"a": tf.keras.layers.Dense(1)(hidden),
                                 "b": tf.keras.layers.Dense(3)(hidden)})
    return ctx, x, model, multi


class Batches(tf.keras.utils.Sequence):
    def __init__(self, x: np.ndarray) -> None:
        super().__init__()
        self.x = x

    def __len__(self) -> int:
        return -(-len(self.x) // BATCH)

    def __getitem__(self, i: int):
        return self.x[i * BATCH:(i + 1) * BATCH], np.zeros(len(self.x[i * BATCH:(i + 1) * BATCH]))


@pytest.mark.parametrize("kind", ["arrays", "wrapped", "sequence", "dataset"])
def test_every_data_kind_streams_the_rows_in_order(setup, tmp_path: Path, kind: str) -> None:
    ctx, x, model, _ = setup
    data = {"arrays": x, "wrapped": ctx.wrap_data(x), "sequence": Batches(x),
            "dataset": tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH)}[kind]
    out = ctx.predict(model, data, output=tmp_path / "p", batch_size=BATCH, verbose=0)
    assert (out.rows, out.parts, out.resumed) == (ROWS, 11, 0)
    got = det.load_predictions(out.path)
    expected = model.predict(x, batch_size=BATCH, verbose=0)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    plain = ctx.predict(model, x, batch_size=BATCH, verbose=0)  # without output=: arrays
    assert isinstance(plain, np.ndarray) and np.array_equal(plain, expected)


def test_several_outputs_come_back_as_the_model_returns_them(setup, tmp_path: Path) -> None:
    ctx, x, _, multi = setup
    ctx.predict(multi, x, output=tmp_path, batch_size=BATCH, verbose=0)
    got, expected = det.load_predictions(tmp_path), multi.predict(x, batch_size=BATCH, verbose=0)
    assert sorted(got) == ["a", "b"]
    assert all(np.array_equal(got[k], expected[k]) for k in expected)


class FlakyBatches(Batches):
    """Batches whose source fails at batch ``fail_at`` (a node going away mid-job)."""

    fail_at: int | None = None

    def __getitem__(self, i: int):
        if i == self.fail_at:
            raise OSError("the node went away")
        return super().__getitem__(i)


def test_a_failure_leaves_valid_parts_that_a_rerun_completes(setup, tmp_path: Path) -> None:
    ctx, x, model, _ = setup
    data = FlakyBatches(x)
    data.fail_at = 4
    with pytest.raises(OSError, match="went away"):
        ctx.predict(model, data, output=tmp_path, batch_size=BATCH, verbose=0)
    assert len(list(tmp_path.glob("part-*.json"))) == 4
    data.fail_at = None
    out = ctx.predict(model, data, output=tmp_path, batch_size=BATCH, verbose=0)
    assert (out.rows, out.resumed) == (ROWS, 4)
    assert np.array_equal(det.load_predictions(tmp_path),
                          model.predict(x, batch_size=BATCH, verbose=0))
    again = ctx.predict(model, data, output=tmp_path, batch_size=BATCH, verbose=0)
    assert again.resumed == 11  # finished: nothing predicted again


def test_another_input_or_model_is_refused(setup, tmp_path: Path) -> None:
    ctx, x, model, _ = setup
    ctx.predict(model, x, output=tmp_path, batch_size=BATCH, verbose=0)
    with pytest.raises(PredictionsMismatchError, match=r"length changed.*103 rows then, 90 now"):
        ctx.predict(model, x[:90], output=tmp_path, batch_size=BATCH, verbose=0)
    other = tf.keras.models.clone_model(model)  # same architecture, other weights
    with pytest.raises(PredictionsMismatchError, match=f"{tmp_path}.*another model"):
        ctx.predict(other, x, output=tmp_path, batch_size=BATCH, verbose=0)
    with pytest.raises(PredictionsMismatchError, match="batch_size=10 to continue"):
        ctx.predict(model, x, output=tmp_path, batch_size=20, verbose=0)
    with pytest.raises(UsageError, match="steps"):
        ctx.predict(model, x, output=tmp_path, steps=3)


def test_a_model_whose_outputs_change_shape_is_refused(setup, tmp_path: Path) -> None:
    """Streamed: refused at the batch that changes, naming it and both shapes, nothing
    half written. In memory (no output=): what model.predict does, in one process it is
    model.predict (Keras's own error when it cannot join the batches)."""
    ctx, x, _, _ = setup
    inp = tf.keras.Input((None,))
    ragged = tf.keras.Model(inp, tf.keras.layers.Lambda(lambda t: t * 2)(inp))
    seq = [x[:10, :3], x[10:20, :3], x[20:30, :4]]  # batch 2's rows are wider

    class ThreeShapes(tf.keras.utils.Sequence):
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int):
            return seq[i]

    with pytest.raises(PredictionsCorruptError,
                       match=r"batch 2's outputs are 0: float32\(4,\), the earlier "
                             r"batches' 0: float32\(3,\) \(in " + str(tmp_path)):
        ctx.predict(ragged, ThreeShapes(), output=tmp_path, verbose=0)
    # nothing half written: parts 0 and 1 complete, no part 2, no temporary file; the
    # manifest says the job is not complete
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "manifest.json", "part-000000000.json", "part-000000000.npy",
        "part-000000001.json", "part-000000001.npy"]
    assert PartStore(tmp_path).complete_parts(range(3)) == {0, 1}
    assert json.loads((tmp_path / "manifest.json").read_text())["complete"] is False
    with pytest.raises(PredictionsIncompleteError):
        det.load_predictions(tmp_path)
    # in memory: what model.predict does (Keras 3 cannot join the batches and raises;
    # Keras 2 joins them into a RaggedTensor)
    keras_kind, keras_result = _outcome(lambda: ragged.predict(ThreeShapes(), verbose=0))
    ours_kind, ours_result = _outcome(lambda: ctx.predict(ragged, ThreeShapes(), verbose=0))
    assert (ours_kind, type(ours_result)) == (keras_kind, type(keras_result))
    if keras_kind == "value":
        assert _as_list(ours_result) == _as_list(keras_result)


def _outcome(call) -> tuple[str, object]:
    try:
        return "value", call()
    except Exception as err:  # whatever Keras raises, compared by type
        return "error", err


def _as_list(value) -> list:
    return value.to_list() if hasattr(value, "to_list") else np.asarray(value).tolist()


def _mount_tmpfs(path: Path, size: str) -> None:
    """A real small filesystem at ``path`` (mount(2) in this process: no process started)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", 0, f"size={size}".encode()) != 0:
        why = os.strerror(ctypes.get_errno())
        pytest.skip(f"a small tmpfs to fill needs mount(2) (root, CAP_SYS_ADMIN): {why}")


def _umount(path: Path) -> None:
    ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(path), 2)  # MNT_DETACH


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount(2) is Linux's")
def test_a_full_disk_is_a_clear_error_and_a_rerun_completes(setup, tmp_path: Path) -> None:
    """A part write that hits ENOSPC on a real (1 MiB tmpfs) filesystem: a det_sdk error
    naming the directory and the full disk, no half-written part, the manifest valid;
    once space is freed the rerun completes, bit for bit an uninterrupted run's."""
    ctx, x, _, _ = setup
    inp = tf.keras.Input((4,))
    wide = tf.keras.Model(inp, tf.keras.layers.Dense(1000)(inp))  # 40 kB a batch of 10
    reference = ctx.predict(wide, x, output=tmp_path / "ref", batch_size=BATCH, verbose=0)
    disk = tmp_path / "disk"
    disk.mkdir()
    _mount_tmpfs(disk, "1m")
    try:
        out = disk / "preds"
        filler = disk / "filler"
        filler.write_bytes(bytes(800 << 10))  # ~200 kB left: a few parts of 11 fit
        with pytest.raises(PredictionsDiskFullError,
                           match=f"the disk holding the output directory {out} is full") as err:
            ctx.predict(wide, x, output=out, batch_size=BATCH, verbose=0)
        assert isinstance(err.value, DetSdkError) and err.value.errno == errno.ENOSPC
        names = sorted(p.name for p in out.iterdir())
        assert not [n for n in names if n.startswith(".")], names  # no temporary file
        parts = {int(n[5:14]) for n in names if n.startswith("part-")}
        assert 0 < len(parts) < 11
        # every part there is whole (with its sidecar, its bytes verified)
        assert PartStore(out).complete_parts(range(11)) == parts
        assert json.loads((out / "manifest.json").read_text())["complete"] is False
        filler.unlink()  # space freed
        done = ctx.predict(wide, x, output=out, batch_size=BATCH, verbose=0)
        assert (done.rows, done.resumed) == (ROWS, len(parts))
        got, expected = det.load_predictions(out), det.load_predictions(reference.path)
        assert got.dtype == expected.dtype and np.array_equal(got, expected)
        for i in range(11):  # the very bytes of every part
            assert (out / f"part-{i:09d}.npy").read_bytes() == \
                (reference.path / f"part-{i:09d}.npy").read_bytes()
    finally:
        _umount(disk)


def test_a_relative_output_resolves_under_the_storage_on_the_cluster(tmp_path: Path,
                                                                     monkeypatch) -> None:
    from types import SimpleNamespace

    from det_sdk.keras._predict import resolve_output

    monkeypatch.chdir(tmp_path)
    # core contexts: a local run's (no kept files; its info is no cluster's), a trial's, a job's
    local = SimpleNamespace(files_dir=None, local_run_dir=tmp_path / "det-runs" / "1",
                            info=SimpleNamespace(config={"checkpoint_storage": {
                                "host_path": "/store"}}))
    assert resolve_output(local, "preds") == tmp_path / "preds"
    assert resolve_output(local, "/abs/preds") == Path("/abs/preds")
    trial = SimpleNamespace(files_dir=Path("/store/trial_files/4/trial_7"))
    assert resolve_output(trial, "preds") == Path("/store/trial_files/4/trial_7/preds")
    job = SimpleNamespace(files_dir=None, local_run_dir=None, info=SimpleNamespace(
        allocation_id="a1b2", config={"checkpoint_storage": {"host_path": "/store"}}))
    assert resolve_output(job, "preds") == Path("/store/job_files/a1b2/preds")


def test_a_dataset_of_unknown_length_streams_and_resumes(setup, tmp_path: Path) -> None:
    ctx, x, model, _ = setup
    fail_at = [4]

    def batches():
        for b, start in enumerate(range(0, ROWS, BATCH)):
            if b in fail_at:
                raise OSError("the node went away")
            yield x[start:start + BATCH]

    ds = tf.data.Dataset.from_generator(
        batches, output_signature=tf.TensorSpec((None, 4), tf.float32))
    assert int(ds.cardinality()) < 0  # unknown: the parts are counted as they are read
    with pytest.raises(tf.errors.OpError, match="went away"):  # tf.data's error, saying why
        ctx.predict(model, ds, output=tmp_path, batch_size=BATCH, verbose=0)
    fail_at.clear()
    out = ctx.predict(model, ds, output=tmp_path, batch_size=BATCH, verbose=0)
    assert (out.rows, out.parts, out.resumed) == (ROWS, 11, 4)
    assert np.array_equal(det.load_predictions(tmp_path),
                          model.predict(x, batch_size=BATCH, verbose=0))
