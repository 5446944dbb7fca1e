"""A stopped and resumed ``context.fit`` goes on exactly as the uninterrupted run: the
``tf.data`` pipeline where it was (shuffle buffers, repeats, reshuffling seeds), callbacks
shown the epoch an uninterrupted run shows them; and what would fail at the first
validation is refused before the first step."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.config import Length  # noqa: E402
from det_sdk.errors import UsageError  # noqa: E402

keras = tf.keras
STEPS = 6  # batches per epoch


def _images(n: int = 384) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.random((n, 8, 8, 1), dtype=np.float32)
    return x, (x.reshape(n, -1).sum(axis=1) * 3 % 10).astype("int64")


class Warmup(keras.callbacks.Callback):
    """A per-batch learning-rate warmup over the first ``epochs`` epochs, written as
    Horovod's ``LearningRateWarmupCallback`` is: it reads the batch index and
    ``params["steps"]``. Records every (epoch, batch, steps) it is shown."""

    def __init__(self, lr: float, epochs: float = 2.0) -> None:
        super().__init__()
        self.lr, self.epochs, self.seen, self.epoch = lr, epochs, [], 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        steps = self.params["steps"]
        self.seen.append((self.epoch, batch, steps))
        progress = min(1.0, (self.epoch + batch / steps) / self.epochs)
        self.model.optimizer.learning_rate.assign(self.lr * (0.1 + 0.9 * progress))


class StopAt(keras.callbacks.Callback):
    """SIGTERM (a pause, a preemption) after batch ``batch`` of epoch ``epoch``."""

    def __init__(self, epoch: int, batch: int) -> None:
        super().__init__()
        self.at, self.epoch = (epoch, batch), 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def _model(ctx, lr: float = 0.05):
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile(ctx.wrap_optimizer(keras.optimizers.SGD(lr, momentum=0.9)),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _horovod_shaped(runs: Path, resume: bool = False, stop=None, seed: int = 3):
    """Horovod's Keras MNIST example in this shape: ``repeat().shuffle().batch()`` with
    ``steps_per_epoch``, a per-batch warmup, 3 epochs."""
    ctx = det.keras.init(runs_dir=runs, seed=seed, resume=1 if resume else None)
    x, y = _images()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(100).batch(32)
    model, warmup = _model(ctx), Warmup(0.05)
    ctx.fit(model, ds, steps_per_epoch=STEPS, epochs=3, verbose=0,
            callbacks=[warmup] + ([stop] if stop else []))
    return model, warmup


def test_horovod_shaped_pipeline_resumes_bit_equal_and_callbacks_see_the_whole_epoch(
        tmp_path: Path) -> None:
    tf.config.experimental.enable_op_determinism()
    whole, whole_warmup = _horovod_shaped(tmp_path / "whole")
    runs = tmp_path / "stopped"
    with pytest.raises(SystemExit) as stopped:
        _horovod_shaped(runs, stop=StopAt(1, 2))  # mid-epoch: epoch 1, after batch 2
    assert stopped.value.code == 0
    resumed, warmup = _horovod_shaped(runs, resume=True)
    # the callback is shown the rest of epoch 1 as the uninterrupted run showed it
    assert warmup.seen == whole_warmup.seen[STEPS + 3:]
    assert warmup.seen[0] == (1, 3, STEPS)
    for a, b in zip(whole.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)  # the same batches, in the same order


def test_a_callback_sees_what_plain_keras_shows_it_after_a_mid_epoch_resume(
        tmp_path: Path) -> None:
    """numpy data (det_sdk's own pipeline): (batch, params["steps"]) continue."""
    x, y = _images(120)
    plain = Warmup(0.05)
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=20, epochs=2, verbose=0, callbacks=[plain])

    def run(resume=False, stop=None):
        ctx = det.keras.init(runs_dir=tmp_path, seed=1, resume=1 if resume else None)
        warm = Warmup(0.05)
        ctx.fit(_model(ctx), x, y, batch_size=20, epochs=2, verbose=0,
                callbacks=[warm] + ([stop] if stop else []))
        return warm

    with pytest.raises(SystemExit):
        run(stop=StopAt(0, 3))
    assert run(resume=True).seen == plain.seen[4:]  # (0, 4, 6), (0, 5, 6), (1, 0, 6) ...


def test_a_reshuffling_dataset_resumes_with_the_orders_of_the_uninterrupted_run(
        tmp_path: Path) -> None:
    """A finite ``shuffle().batch()`` (keras-io's DCGAN reads one): Keras takes a new
    iterator every epoch, whose order comes from the dataset's seed generator; a resumed
    run draws the same orders."""
    tf.config.experimental.enable_op_determinism()

    def run(runs: Path, resume: bool = False, stop=None):
        ctx = det.keras.init(runs_dir=runs, seed=2, resume=1 if resume else None)
        x, y = _images(192)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(192).batch(32)
        model = _model(ctx)
        ctx.fit(model, ds, epochs=3, verbose=0, callbacks=[stop] if stop else [])
        return model

    whole = run(tmp_path / "whole")
    for at in ((0, 5), (1, 2)):  # the last batch of epoch 0; the middle of epoch 1
        runs = tmp_path / f"stopped-{at[0]}"
        with pytest.raises(SystemExit):
            run(runs, stop=StopAt(*at))
        resumed = run(runs, resume=True)
        for a, b in zip(whole.get_weights(), resumed.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_generator_pipeline_is_replayed_and_the_stop_says_so_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    x, y = _images(192)

    def rows():
        yield from zip(x, y)

    def run(runs: Path, resume: bool = False, stop=None):
        ctx = det.keras.init(runs_dir=runs, seed=2, resume=1 if resume else None)
        ds = tf.data.Dataset.from_generator(rows, output_signature=(
            tf.TensorSpec((8, 8, 1), tf.float32), tf.TensorSpec((), tf.int64)))
        ds = ds.repeat().batch(32)
        model = _model(ctx)
        ctx.fit(model, ds, steps_per_epoch=STEPS, epochs=2, verbose=0,
                callbacks=[stop] if stop else [])
        return model

    whole = run(tmp_path / "whole")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="det_sdk"), pytest.raises(SystemExit):
        run(tmp_path / "stopped", stop=StopAt(1, 1))
    said = [r.getMessage() for r in caplog.records if "cannot be saved exactly" in r.getMessage()]
    assert len(said) == 1 and "GeneratorDataset" in said[0] and "from_generator" in said[0]
    resumed = run(tmp_path / "stopped", resume=True)  # a deterministic generator: exact
    for a, b in zip(whole.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)

    # a Python generator given to fit itself: Keras reads it; the first checkpoint says so
    caplog.clear()
    ctx = det.keras.init(runs_dir=tmp_path / "plain", seed=2)
    with caplog.at_level(logging.WARNING, logger="det_sdk"):
        ctx.fit(_model(ctx), ((x[i:i + 32], y[i:i + 32]) for _ in range(9) for i in (0, 32)),
                steps_per_epoch=6, epochs=2, verbose=0)
    said = [r.getMessage() for r in caplog.records if "Python generator" in r.getMessage()]
    assert len(said) == 1 and "a resume reads it from its start" in said[0]


class _Started(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        raise AssertionError("trained a batch before refusing")


def test_a_searched_fit_without_validation_data_is_refused_before_its_first_batch(
        tmp_path: Path) -> None:
    """The fit a searcher sets the length of (on the master; here its local stand-in, the
    length a TFKerasTrial's config gives) needs a validation metric: refused at once."""
    ctx = det.keras.init(runs_dir=tmp_path, config={"searcher": {
        "name": "single", "metric": "val_loss", "max_length": {"epochs": 2}}})
    ctx.core.searcher.use_local_length(Length(epochs=2))
    x, y = _images(64)
    with pytest.raises(UsageError, match="no validation data; pass validation_data"):
        ctx.fit(_model(ctx), x, y, batch_size=16, verbose=0, callbacks=[_Started()])


class _NoCall(keras.Model):
    """A GAN-like model: its own train_step, no call(), no test_step."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((self.dense(x) - y) ** 2)
        grads = tape.gradient(loss, self.dense.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.dense.trainable_weights))
        return {"loss": loss}


def test_validation_of_a_model_keras_cannot_evaluate_is_refused_naming_test_step(
        tmp_path: Path) -> None:
    ctx = det.keras.init(runs_dir=tmp_path)
    model = _NoCall()
    model.compile(ctx.wrap_optimizer(keras.optimizers.SGD(0.1)))
    x = np.ones((32, 3), "float32")
    with pytest.raises(UsageError, match="add a test_step"):
        ctx.fit(model, x, x[:, :1], batch_size=8, validation_data=(x, x[:, :1]), verbose=0,
                callbacks=[_Started()])


def test_a_continued_fit_trains_further_bit_equal_to_an_uninterrupted_longer_one(
        tmp_path: Path) -> None:
    """`det e continue` (issue 48): a searched fit that completed its length resumes
    from its last checkpoint with a longer one (the master's new `searcher.max_length`;
    here its local stand-in) and ends where a fit of that length from the start ends."""
    tf.config.experimental.enable_op_determinism()
    searcher = {"name": "single", "metric": "val_loss", "max_length": {"epochs": 2}}
    x, y = _images()

    def run(runs: Path, epochs: int, resume: bool = False):
        ctx = det.keras.init(runs_dir=runs, seed=4, resume=1 if resume else None,
                             config={"searcher": searcher})
        ctx.core.searcher.use_local_length(Length(epochs=epochs))
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(100).batch(32)
        model, warmup = _model(ctx), Warmup(0.05)
        ctx.fit(model, ds, steps_per_epoch=STEPS, validation_data=(x[:64], y[:64]),
                verbose=0, callbacks=[warmup])
        return model, warmup

    longer, longer_warmup = run(tmp_path / "longer", 4)
    runs = tmp_path / "continued"
    run(runs, 2)  # completed: its length trained and validated
    continued, warmup = run(runs, 4, resume=True)
    assert warmup.seen == longer_warmup.seen[2 * STEPS:]  # epochs 2 and 3, nothing again
    assert warmup.seen[0] == (2, 0, STEPS)
    for a, b in zip(longer.get_weights(), continued.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
