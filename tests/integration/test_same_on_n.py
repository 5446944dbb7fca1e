"""Issue 10: a script that trains on one process trains the same on N (`horovodrun -np 2`).

tests/scripts/hvd_same_on_n.py runs each case once under 2 processes and once as one
process (the reference); the tests read its JSON reports. Cases that need no second
process (checkpoint weights into a subclassed model, run ids, retention, stopping
before fit, resuming random draws) run here or as one script.

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
from det_sdk.keras import _compat

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
