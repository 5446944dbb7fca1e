"""``context.predict(..., output=DIR)`` in this process: every data kind streams the rows
``model.predict`` returns, in order; a failure leaves valid parts that a rerun completes;
another job's directory and a model whose outputs change shape are refused.
(Processes killed for real: tests/e2e/test_predict_stream.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.errors import UsageError  # noqa: E402
from det_sdk.predictions import (  # noqa: E402
    PredictionsCorruptError,
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
    ctx, x, _, _ = setup
    inp = tf.keras.Input((None,))
    ragged = tf.keras.Model(inp, tf.keras.layers.Lambda(lambda t: t * 2)(inp))
    seq = [x[:10, :3], x[10:20, :4]]

    class TwoShapes(tf.keras.utils.Sequence):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: int):
            return seq[i]

    with pytest.raises(PredictionsCorruptError, match="batch 1's outputs are 0: float32\\(4,\\)"):
        ctx.predict(ragged, TwoShapes(), output=tmp_path, verbose=0)


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
