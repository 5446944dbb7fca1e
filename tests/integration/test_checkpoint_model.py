"""load_checkpoint_model: a checkpoint gives back the trained model, compiled, in this process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402


class Scale(tf.keras.layers.Layer):
    """A custom layer: its checkpoint needs custom_objects to load."""

    def __init__(self, factor: float = 2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


def _train(tmp_path: Path, custom: bool = False):
    ctx = det.keras.init(runs_dir=tmp_path, hparams={"lr": 0.01}, seed=3)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 5)).astype("float32")
    y = rng.integers(0, 3, size=64)
    layers = [tf.keras.Input((5,)), tf.keras.layers.Dense(8, activation="relu")]
    if custom:
        layers.append(Scale(3.0))
    layers.append(tf.keras.layers.Dense(3, activation="softmax"))
    model = tf.keras.Sequential(layers)
    model.compile(ctx.wrap_optimizer(tf.keras.optimizers.Adam(ctx.hparams["lr"])),
                  "sparse_categorical_crossentropy", metrics=["accuracy"])
    xs, ys = ctx.wrap_data(x, y)
    ctx.fit(model, x=xs, y=ys, batch_size=16, epochs=2, validation_data=(x, y), verbose=0)
    return ctx, model, x, y


def test_loaded_model_predicts_like_the_trained_one(tmp_path: Path) -> None:
    ctx, model, x, y = _train(tmp_path)
    expected = model.predict(x, verbose=0)

    by_trial = ctx.load_checkpoint_model(trial_id=ctx.trial_id)
    np.testing.assert_array_equal(by_trial.predict(x, verbose=0), expected)
    # compiled, with the optimizer state of the trained model
    assert by_trial.optimizer is not None
    assert int(by_trial.optimizer.iterations) == int(model.optimizer.iterations) == 8
    for a, b in zip(by_trial.optimizer.variables, model.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    loss, acc = by_trial.evaluate(x, y, verbose=0)
    assert np.isfinite(loss) and 0 <= acc <= 1

    uuid = ctx.core.checkpoint.latest_checkpoint
    by_uuid = ctx.load_checkpoint_model(checkpoint_uuid=uuid)
    np.testing.assert_array_equal(by_uuid.predict(x, verbose=0), expected)


def test_best_checkpoint_follows_the_metric(tmp_path: Path) -> None:
    ctx, _, _, _ = _train(tmp_path)
    rows = ctx.core._session.read_checkpoints()
    best = min(rows, key=lambda r: r["metrics"]["val_loss"])["uuid"]
    assert ctx.core.checkpoint.select(ctx.trial_id, best=True) == best
    assert ctx.load_checkpoint_model(trial_id=ctx.trial_id, best=True) is not None


def test_custom_layers_need_custom_objects(tmp_path: Path) -> None:
    ctx, model, x, _ = _train(tmp_path, custom=True)
    with pytest.raises(ValueError, match="custom_objects"):
        ctx.load_checkpoint_model(trial_id=ctx.trial_id)
    loaded = ctx.load_checkpoint_model(trial_id=ctx.trial_id,
                                       custom_objects={"Scale": Scale})
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_another_process_loads_a_run_by_id(tmp_path: Path) -> None:
    """Batch inference in a new context (a later script) finds the run's checkpoint."""
    ctx, model, x, _ = _train(tmp_path)
    later = det.keras.init(runs_dir=tmp_path, checkpoint_period=False)
    loaded = later.load_checkpoint_model(trial_id=ctx.trial_id)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
