"""Issue 10: a script that trains on one process trains the same on N (`horovodrun -np 2`).

tests/scripts/hvd_same_on_n.py runs each case once under 2 processes and once as one
process (the reference); the tests read its JSON reports. Cases that need no second
process (checkpoint weights into a subclassed model, run ids, retention, stopping
before fit, resuming random draws) run here or as one script.

Issue 49's data cases (rows cut from wrapped views, unwrapped datasets alike on every
process, preprocessing adapted on wrapped data) run here on thread ranks (two ranks as
two threads of this process: tests/integration/test_fit_inputs.py's ``_on_ranks``).

This module's other half, its end-to-end tests (real processes): tests/e2e/test_same_on_n.py.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_sdk as det
from det_sdk.distributed import SingleProcess
from det_sdk.errors import UsageError
from det_sdk.keras import _compat, _preprocessing
from det_sdk.keras import _data as sdk_data
from det_sdk.keras._fit_inputs import fit_inputs
from det_sdk.keras._plan import FitCall
from tests.integration.test_fit_inputs import _on_ranks

keras = tf.keras

class Subclassed(keras.Model):
    """A model Keras cannot rebuild from a config; a generator drawn in its train_step."""

    def __init__(self, noise: float = 0.0) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(1)
        self.noise = noise
        self.gen = tf.random.Generator.from_seed(5)  # a tf.random generator (Keras 2's way)
        if _compat.KERAS_MAJOR >= 3:
            self.seeds = keras.random.SeedGenerator(6)  # Keras 3's seeded generator

    def call(self, x):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y = data[0], data[1]
        x = x + self.noise * self.gen.normal(tf.shape(x))
        if _compat.KERAS_MAJOR >= 3:
            x = x + self.noise * keras.random.normal(tf.shape(x), seed=self.seeds)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 3)).astype("float32")
    return x, x[:, :1] * 2 - x[:, 1:2]


def _fit(ctx, noise: float = 0.0, epochs: int = 3, callbacks=()) -> Subclassed:
    x, y = _data()
    model = Subclassed(noise)
    model.compile(optimizer=ctx.wrap_optimizer(keras.optimizers.SGD(0.05)), loss="mse")
    ctx.fit(model, x=x, y=y, batch_size=8, epochs=epochs, validation_data=(x, y), verbose=0,
            callbacks=list(callbacks))
    return model


def test_checkpoint_weights_load_into_a_subclassed_model(tmp_path: Path) -> None:
    ctx = det.keras.init(runs_dir=tmp_path, seed=2)
    trained = _fit(ctx)
    x, _ = _data()
    with pytest.raises(Exception, match=r"load_checkpoint_weights"):
        ctx.load_checkpoint_model(trial_id=ctx.trial_id)  # Keras cannot rebuild it
    fresh = Subclassed()
    with pytest.raises(ValueError, match="build it first"):
        ctx.load_checkpoint_weights(fresh, trial_id=ctx.trial_id)
    fresh(x[:1])
    assert not np.allclose(fresh.predict(x, verbose=0), trained.predict(x, verbose=0))
    meta = ctx.load_checkpoint_weights(fresh, trial_id=ctx.trial_id, best=True)
    assert meta["epoch"] >= 1
    meta = ctx.load_checkpoint_weights(fresh, checkpoint_uuid=ctx.core.checkpoint.latest_checkpoint)
    assert meta["epoch"] == 3
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), trained.predict(x, verbose=0))


def test_trial_id_is_the_local_run_id(tmp_path: Path) -> None:
    assert det.keras.init(runs_dir=tmp_path, seed=1).trial_id == 1
    assert det.keras.init(runs_dir=tmp_path, seed=1).trial_id == 2


def test_local_runs_keep_latest_and_best_checkpoints(tmp_path: Path) -> None:
    ctx = det.keras.init(runs_dir=tmp_path / "default", seed=3)
    _fit(ctx, epochs=4)
    rows = [json.loads(line) for line in
            (tmp_path / "default" / "1" / "checkpoints.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4]  # the log keeps every row
    best = min(rows, key=lambda r: r["metrics"]["val_loss"])["uuid"]
    kept = {p.name for p in (tmp_path / "default" / "1" / "checkpoints").iterdir()}
    assert kept == {rows[-1]["uuid"], best}
    assert ctx.core.checkpoint.select(1, best=True) == best

    ctx = det.keras.init(runs_dir=tmp_path / "two", seed=3, config={
        "checkpoint_storage": {"save_trial_latest": 2, "save_trial_best": 0}})
    _fit(ctx, epochs=4)
    kept = {p.name for p in (tmp_path / "two" / "1" / "checkpoints").iterdir()}
    assert kept == {r["uuid"] for r in ctx.core._session.read_checkpoints()} and len(kept) == 2
    assert [r["epoch"] for r in ctx.core._session.read_checkpoints()] == [3, 4]


class _StopAfterEpoch(keras.callbacks.Callback):
    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


def test_random_draws_in_a_custom_train_step_resume_exactly(tmp_path: Path) -> None:
    tf.config.experimental.enable_op_determinism()
    whole = _fit(det.keras.init(runs_dir=tmp_path / "whole", seed=4), noise=0.5).get_weights()
    runs = tmp_path / "stopped"
    with pytest.raises(SystemExit) as stop:
        _fit(det.keras.init(runs_dir=runs, seed=4), noise=0.5, callbacks=[_StopAfterEpoch(0)])
    assert stop.value.code == 0
    resumed = _fit(det.keras.init(runs_dir=runs, resume=1), noise=0.5).get_weights()
    for a, b in zip(whole, resumed):
        np.testing.assert_array_equal(a, b)
    # the draws matter: without the noise generators' state the run ends elsewhere
    fresh = _fit(det.keras.init(runs_dir=tmp_path / "other", seed=4), noise=0.5, epochs=1)
    assert not np.array_equal(fresh.get_weights()[0], whole[0])


# --- Issue 49: data on N processes means what it means on one (thread ranks) -------------


def _rows(n: int = 12) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(49)
    x = rng.normal(loc=3.0, size=(n, 2)).astype("float32") * np.array([1, 10], "float32")
    return x, (x[:, :1] > 3).astype("float32")


@pytest.mark.parametrize("cut", [
    lambda a: a[:4], lambda a: a[-4:], lambda a: a[a[:, 0] > 3], lambda a: a[[0, 2, 4]],
    lambda a: (a / 2)[1:],
    lambda a: a[:6],  # all of rank 0's 6 rows, not of rank 1's 7: refused on both alike
    lambda a: a[np.arange(len(a))],  # indices, even all of them: decided by how it is written
])
def test_rows_cut_from_wrapped_views_are_refused_on_two_processes(cut) -> None:
    x, y = _rows(13)

    def shape(d):
        xs, ys = sdk_data.wrap_data(d, x, y)
        fit_inputs(d, {"x": xs, "y": ys, "batch_size": 2, "validation_data": (cut(xs), ys[:4])})

    _, _, errors = _on_ranks(2, shape)
    assert all(isinstance(e, UsageError) and "context.fit: validation_data" in str(e)
               and "before wrap_data" in str(e) for e in errors), errors

    def train(d):
        xs, ys = sdk_data.wrap_data(d, x, y)
        inputs = fit_inputs(d, {"x": cut(xs), "y": cut(ys), "batch_size": 2})
        inputs.call_inputs(FitCall(0, 1, 0, None, [1]), seed=0)

    _, _, errors = _on_ranks(2, train)
    assert all(isinstance(e, UsageError) and "context.fit: x, y" in str(e) for e in errors)


def test_row_preserving_derivations_and_one_process_cuts_still_train(caplog) -> None:
    x, y = _rows()

    def shape(d):
        xs, ys = sdk_data.wrap_data(d, x, y)
        derived = (xs * 2.0)[..., None][..., 0].astype("float64")[:, ::-1]
        inputs = fit_inputs(d, {"x": derived, "y": ys, "batch_size": 2,
                                "validation_data": (xs[0:, :1] + 1, ys[:])})
        return inputs.steps_per_epoch()

    _, results, errors = _on_ranks(2, shape)
    assert errors == [None, None] and results == [3, 3]
    # on one process a cut is what the script means: it trains, with a warning
    xs, ys = sdk_data.wrap_data(SingleProcess(), x, y)
    inputs = fit_inputs(SingleProcess(), {"x": xs[:8], "y": ys[:8], "batch_size": 2,
                                          "validation_data": (xs[:4], ys[:4])})
    assert inputs.validation.parts[0].shape == (4, 2)
    call = inputs.call_inputs(FitCall(0, 1, 0, None, [1]), seed=0)
    assert call["steps_per_epoch"] == 4
    assert "refused on several" in caplog.text


def test_an_unwrapped_dataset_alike_on_every_process_is_refused() -> None:
    x, y = _rows(32)

    def dataset(d, wrap: bool, per_rank: bool = False):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if wrap:
            ds = sdk_data.wrap_data(d, ds)
        # the same seed on every rank, as init() gives TensorFlow's global seed
        ds = ds.repeat().shuffle(32, seed=7 + (d.rank if per_rank else 0)).batch(4)
        return fit_inputs(d, {"x": ds, "steps_per_epoch": 2})

    _, _, errors = _on_ranks(2, lambda d: dataset(d, wrap=False))
    assert all(isinstance(e, UsageError) and "the same batches" in str(e)
               and "context.wrap_data(ds)" in str(e) for e in errors), errors
    _, _, errors = _on_ranks(2, lambda d: dataset(d, wrap=True))
    assert errors == [None, None]  # wrap_data's shards
    _, _, errors = _on_ranks(2, lambda d: dataset(d, wrap=False, per_rank=True))
    assert errors == [None, None]  # each process's own data (Horovod's per-rank seeds)


def _adapted(make, data):
    layer = make()
    layer.adapt(data)
    return layer


def test_preprocessing_adapted_on_wrapped_data_equals_one_process() -> None:
    _preprocessing.adapt_over_all_rows()
    layers = keras.layers
    x, y = _rows(13)  # 6 and 7 rows
    words = np.array([["a"], ["b"], ["b"], ["c"], ["c"], ["c"], ["d"]] * 2, dtype=object)
    one = {
        "norm": _adapted(layers.Normalization, x).get_weights(),
        "scaled": _adapted(layers.Normalization, x / 255.0).get_weights(),
        "bins": _adapted(lambda: layers.Discretization(num_bins=4), x[:, 1]).bin_boundaries,
        "words": _adapted(layers.StringLookup, words).get_vocabulary(),
        "ds": _adapted(layers.Normalization,
                       tf.data.Dataset.from_tensor_slices(x).batch(4)).get_weights(),
    }

    def on_rank(d):
        xs, _ = sdk_data.wrap_data(d, x, y)
        ws = sdk_data.wrap_data(d, words)
        ds = sdk_data.wrap_data(d, tf.data.Dataset.from_tensor_slices(x).batch(4))
        got = {
            "norm": _adapted(layers.Normalization, xs).get_weights(),
            "scaled": _adapted(layers.Normalization, xs / 255.0).get_weights(),  # gathered
            "bins": _adapted(lambda: layers.Discretization(num_bins=4), xs[:, 1]).bin_boundaries,
            "words": _adapted(layers.StringLookup, ws).get_vocabulary(),
            "ds": _adapted(layers.Normalization, ds).get_weights(),
        }
        for refused in (lambda: xs[:4], lambda: ds.map(lambda a: a * 2)):
            with pytest.raises(UsageError, match=r"adapt.*before wrap_data"):
                _adapted(layers.Normalization, refused())
        return got

    _, results, errors = _on_ranks(2, on_rank)
    assert errors == [None, None], errors
    for got in results:
        assert got["words"] == one["words"]
        np.testing.assert_allclose(got["bins"], one["bins"], rtol=1e-6)
        for key in ("norm", "scaled", "ds"):
            for a, b in zip(got[key], one[key]):
                np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=key)


class _MirrorProcess(SingleProcess):
    """The second of two processes, as a mirror of this one (a test double at the
    process boundary: real processes run in tests/e2e/test_same_on_n.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.size = 2

    def gather_arrays(self, arr):
        return np.concatenate([arr, arr])


def test_the_divergence_guard_keeps_no_model_it_checked(tmp_path: Path) -> None:
    """The guard's compiled fingerprints were kept by ``id(model)``: they held every
    checked model's weights for the life of the context, and a new model made where a
    freed one had lived was fingerprinted by the old one's weights, on one process and
    not another (a false DivergenceError, or a check of the wrong weights)."""
    import gc
    import weakref

    ctx = det.keras.init(runs_dir=tmp_path, seed=4, checkpoint_period=False)
    loop = ctx._loop
    loop.distributed = _MirrorProcess()
    gone = []
    for _ in range(3):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        loop.check_in_sync(model, "here")
        assert len(loop._fingerprints) == 1
        gone.append(weakref.ref(model.trainable_weights[0]))
        del model
        gc.collect()
    assert [ref() for ref in gone] == [None, None, None]
    assert len(loop._fingerprints) == 0


class _SkewedMirror(_MirrorProcess):
    """A second process whose weights differ from this one's (a double, as above)."""

    def gather_arrays(self, arr):
        return np.concatenate([arr, arr + 1.0])


def test_the_divergence_guard_names_the_variable_each_process_sum_and_the_cause(
        tmp_path: Path) -> None:
    from det_sdk.errors import DetSdkError, DivergenceError
    from det_sdk.keras._loop import BROADCAST_MISSED

    ctx = det.keras.init(runs_dir=tmp_path, seed=4, checkpoint_period=False)
    loop = ctx._loop
    loop.distributed = _SkewedMirror()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="head")])
    model.layers[0].kernel.assign(np.ones((3, 2), "float32"))
    with pytest.raises(DivergenceError, match=(
            r"at the start of this fit.*2 of 2 variables differ, first "
            r"'(sequential\w*/)?head/kernel(:0)?': its sum is rank 0: 6\.0, rank 1: 7\.0")
                       ) as err:
        loop.check_in_sync(model, "at the start of this fit", False, BROADCAST_MISSED)
    assert "det_sdk's fault or Horovod's" in str(err.value)
    assert isinstance(err.value, DetSdkError)
    with pytest.raises(DivergenceError, match="wrap_optimizer"):  # after steps: the script's
        loop.check_in_sync(model, "after step 1", False)
