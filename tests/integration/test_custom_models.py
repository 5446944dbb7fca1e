"""Issue 28: what plain ``model.fit`` accepts, ``context.fit`` accepts: custom models.

The models are tests/scripts/custom_models.py's: a VAE (custom ``train_step``, no
``call()``, no ``get_config``, x-only data, noise from a checkpointed generator) and a
Distiller (its own ``compile`` signature, ``train_step`` and ``test_step``, a plain
tensor among ``test_step``'s outputs). One process in-process; two under
``horovodrun -np 2`` (slow).

This module's other half, its end-to-end tests (real processes): tests/e2e/test_custom_models.py.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_sdk as det
from det_sdk.keras import _compat
from det_sdk.keras._checkpoint import WeightsOnlyCheckpointError
from tests.support import SCRIPTS, assert_arrays_equal

sys.path.insert(0, str(SCRIPTS))
import custom_models as cm

keras = _compat.keras


def test_vae_without_call_config_or_targets_checkpoints_by_weights_and_resumes_exactly(
        tmp_path: Path) -> None:
    tf.config.experimental.enable_op_determinism()
    cm.TUPLES_SEEN.clear()
    whole, history = cm.fit_vae(det.keras.init(runs_dir=tmp_path / "whole", seed=4))
    assert cm.TUPLES_SEEN and not any(cm.TUPLES_SEEN)  # x reached train_step as the tensor
    assert len(history.history["total_loss"]) == 3 and "val_total_loss" in history.history

    runs = tmp_path / "stopped"
    with pytest.raises(SystemExit) as stop:
        cm.fit_vae(det.keras.init(runs_dir=runs, seed=4), callbacks=[cm.StopAfterEpoch(0)])
    assert stop.value.code == 0
    ctx = det.keras.init(runs_dir=runs, resume=1)
    resumed, _ = cm.fit_vae(ctx)
    assert_arrays_equal(whole.get_weights(), resumed.get_weights())  # the noise resumed too

    # The checkpoint holds the weights and says why it holds no architecture.
    path = ctx.core.checkpoint.checkpoint_path(ctx.core.checkpoint.latest_checkpoint)
    spec = json.loads((path / "model.json").read_text())
    assert spec["model_config"] is None and spec["weights_only"]["class"] == "VAE"
    with pytest.raises(WeightsOnlyCheckpointError, match=r"model=model") as err:
        ctx.load_checkpoint_model(trial_id=1)
    assert isinstance(err.value, ValueError) and "load_checkpoint_weights" in str(err.value)
    fresh = cm.make_vae()
    fresh.compile(optimizer=keras.optimizers.Adam(0.01))
    assert ctx.load_checkpoint_model(trial_id=1, model=fresh) is fresh
    assert_arrays_equal(fresh.get_weights(), resumed.get_weights())
    assert int(fresh.optimizer.iterations.numpy()) == int(
        resumed.optimizer.iterations.numpy())  # the optimizer's state came with them


def test_distiller_reloads_with_its_own_compile_and_its_outputs_are_whole_data_means(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # its compile has no loss: Keras 2 logs no val_loss, so "best" is by its own output
    ctx = det.keras.init(runs_dir=tmp_path, seed=4, config={
        "searcher": {"name": "single", "metric": "val_student_loss"}})
    trained, history = cm.fit_distiller(ctx)
    assert {"student_loss", "distillation_loss", "acc", "val_student_loss"} <= set(
        history.history)

    with caplog.at_level(logging.WARNING, logger="det_sdk"):
        best = ctx.load_checkpoint_model(trial_id=ctx.trial_id, best=True,
                                         custom_objects={"Distiller": cm.Distiller})
    assert isinstance(best, cm.Distiller)
    assert "Distiller overrides compile()" in caplog.text
    latest = ctx.load_checkpoint_model(checkpoint_uuid=ctx.core.checkpoint.latest_checkpoint,
                                       custom_objects={"Distiller": cm.Distiller})
    assert_arrays_equal(latest.student.get_weights(), trained.student.get_weights())
    assert int(latest.optimizer.iterations.numpy()) == 18  # 3 epochs of 6 steps, restored

    # The user compiles it with their own arguments; test_step's plain tensor
    # (student_loss) is the mean over all 30 rows, not the last batch of 2's value.
    cm.compile_distiller(latest, ctx)
    x, y = cm.data()
    logs = ctx.evaluate(latest, x[:30], y[:30], batch_size=7, return_dict=True, verbose=0)
    per_row = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")(
        y[:30], latest.student(x[:30]))
    assert logs["student_loss"] == pytest.approx(float(np.mean(per_row)), rel=1e-5)
    last_batch = float(np.mean(per_row[28:]))
    assert abs(logs["student_loss"] - last_batch) > 1e-4  # what Keras alone would report


class _Noisy(cm.VAE):
    """The VAE drawing its noise with TensorFlow's global generator (the Keras example's
    ``tf.keras.backend.random_normal`` on Keras 2): no checkpoint holds that state."""

    def _vae_losses(self, x, noise):
        mean, log_var = self.encoder(x)
        if noise:
            draw = tf.random.normal if cm.K3 else keras.backend.random_normal
            mean = mean + tf.exp(0.5 * log_var) * draw(tf.shape(mean))
        recon = tf.reduce_mean(tf.reduce_sum(tf.square(x - self.decoder(mean)), axis=1))
        return recon, recon


def test_stateful_random_ops_get_one_warning_naming_op_and_fix(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctx = det.keras.init(runs_dir=tmp_path, seed=1)
    x, y = cm.data()

    def fit(model, targets=None) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="det_sdk"):
            ctx.fit(model, x, targets, batch_size=8, epochs=2, verbose=0,
                    validation_data=(x[:8],) if targets is None else (x[:8], y[:8]))
        return [r.getMessage() for r in caplog.records
                if r.name.startswith("det_sdk") and "random" in r.getMessage()]

    noisy = cm.make_vae()
    noisy.__class__ = _Noisy
    noisy.compile(optimizer=ctx.wrap_optimizer(keras.optimizers.Adam(0.01)))
    [line] = fit(noisy)  # one line for the whole fit, not one per epoch
    assert "RandomStandardNormal (tf.random.normal)" in line and "_Noisy" in line
    fix = "keras.random.normal(shape, seed=self.seed_generator)" if cm.K3 else \
        "tf.random.Generator"
    assert fix in line and "\n" not in line

    vae = cm.make_vae()  # a SeedGenerator (Keras 3) or tf.random.Generator (Keras 2)
    vae.compile(optimizer=ctx.wrap_optimizer(keras.optimizers.Adam(0.01)))
    assert fit(vae) == []
    dropout = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                                keras.layers.Dropout(0.3), keras.layers.Dense(3)])
    dropout.compile(optimizer=ctx.wrap_optimizer(keras.optimizers.SGD(0.1)),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert fit(dropout, y) == []  # Keras's own layers draw through checkpointed generators


class _NoisyInABranch(keras.layers.Layer):
    """Draws with TensorFlow's stateful op inside a ``tf.cond`` branch: a function nested
    in the traced step, not an op of its top graph."""

    def call(self, x):
        return tf.cond(tf.reduce_sum(x) > -1e9, lambda: x + tf.random.normal(tf.shape(x)),
                       lambda: x)


def test_a_stateful_random_op_in_a_nested_function_is_found() -> None:
    from det_sdk.keras import _compat

    def traced(*layers: keras.layers.Layer) -> keras.Model:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), *layers])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        model.fit(np.zeros((8, 4), "float32"), np.zeros((8, 3), "float32"), verbose=0)
        return model

    assert _compat.unsaved_random_ops(traced(_NoisyInABranch())) == ["RandomStandardNormal"]
    assert _compat.unsaved_random_ops(traced()) == []


def test_a_padding_step_zeroes_this_process_gradients_and_a_share_of_one_changes_nothing(
        ) -> None:
    # What replaced the weight-0 padding row in numpy batches: the averaging optimizer
    # gives the average this process's share (0 at a step on padding only) as its weight.
    weights = []

    def average(grads, weight=None):
        # the contract (_compat.AverageFn): each process's own gradients and its weight,
        # averaged as sum(w_i g_i) / sum(w_i), 0 where no process has weight; one here
        weights.append(float(weight))
        return [tf.math.divide_no_nan(g * weight, weight) for g in grads]

    opt = _compat.averaging_optimizer(keras.optimizers.SGD(0.5), average=average, processes=1)
    plain = keras.optimizers.SGD(0.5)
    var, ref = tf.Variable([1.0, 2.0]), tf.Variable([1.0, 2.0])
    grads = tf.constant([0.1, 0.3])
    share = _compat.gradient_share()
    try:
        share.assign(0.0)
        opt.apply_gradients([(grads, var)])
        assert var.numpy().tolist() == [1.0, 2.0]
        share.assign(1.0)
        opt.apply_gradients([(grads, var)])
        plain.apply_gradients([(grads, ref)])
        np.testing.assert_array_equal(var.numpy(), ref.numpy())  # bit-equal
        assert weights == [0.0, 1.0]  # the share times the rows (none counted here: 1)
    finally:
        share.assign(1.0)
