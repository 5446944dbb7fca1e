"""Keras's optimizer options across a stop (issue 49): each resumes bit-equal.

The variants are tests/scripts/optimizer_options.py's: moving averages (``use_ema``,
with and without ``ema_overwrite_frequency``), gradient accumulation, clipping
(``clipnorm``, ``clipvalue``, ``global_clipnorm``), AdamW's weight decay,
``loss_scale_factor``, a learning-rate schedule and a callable, XLA
(``jit_compile=True``, on the CPU) and ``steps_per_execution``, several options to a
variant. Each trains two epochs of six batches three times, in-process: uninterrupted;
stopped by SIGTERM in the middle of the first epoch (``context.fit`` saves and ends the
script); resumed from that checkpoint. The resumed run must end with the same weights,
optimizer variables and validations as the uninterrupted one, bit for bit.

This module's other half, the same variants on 2 processes against 1:
tests/e2e/test_optimizer_options.py.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.errors import UsageError  # noqa: E402
from det_sdk.keras import _checkpoint, _compat  # noqa: E402
from tests.support import SCRIPTS, assert_arrays_equal  # noqa: E402

sys.path.insert(0, str(SCRIPTS))
import optimizer_options as oo  # noqa: E402

keras = _compat.keras
STOP_AFTER = 3  # batch index: the stop lands at (epoch 0, batch 4), mid-epoch


class _SigtermAfter(keras.callbacks.Callback):
    """SIGTERM to this process once batch ``batch`` (or a later one: steps_per_execution
    reports every few) of epoch 0 has ended."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch, self.epoch, self.sent = batch, 0, False

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 0 and batch >= self.batch and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)


def _swap_for_validation(variant: str) -> list:
    """Keras 3's SwapEMAWeights (validation on the averages) with one variant that keeps
    averages apart: it swaps them in and out around each validation."""
    if oo.K3 and variant.startswith("ema-"):
        return [keras.callbacks.SwapEMAWeights()]
    return []


@pytest.mark.parametrize("variant", list(oo.VARIANTS))
def test_optimizer_options_resume_bit_equal_after_a_mid_epoch_stop(
        tmp_path: Path, variant: str) -> None:
    whole, whole_hist = oo.fit(det.keras.init(runs_dir=tmp_path / "whole", seed=3), variant,
                               _swap_for_validation(variant))
    runs = tmp_path / "stopped"
    with pytest.raises(SystemExit) as stop:
        oo.fit(det.keras.init(runs_dir=runs, seed=3), variant,
               [*_swap_for_validation(variant), _SigtermAfter(STOP_AFTER)])
    assert stop.value.code == 0
    ctx = det.keras.init(runs_dir=runs, resume=1)
    saved = ctx.core._session.read_checkpoints()[-1]
    assert (saved["epoch"], saved["batch"]) == (0, 4)  # mid-epoch
    resumed, resumed_hist = oo.fit(ctx, variant, _swap_for_validation(variant))
    weights, slots = oo.state(whole)
    weights_r, slots_r = oo.state(resumed)
    assert_arrays_equal(weights, weights_r)
    assert_arrays_equal(slots, slots_r)
    # validations equal; training averages from the epoch after the resumed one (the
    # resumed epoch's cover the batches after the resume only: docs/local-runs.md)
    for key, values in whole_hist.history.items():
        got = resumed_hist.history[key]
        assert (got if key.startswith("val_") else got[1:]) == \
            (values if key.startswith("val_") else values[1:]), key


def test_a_fit_with_ema_ends_on_the_averages_and_its_last_checkpoint_holds_them(
        tmp_path: Path) -> None:
    """As Keras's fit: the weights are overwritten by their moving averages once, at the
    end; the last checkpoint holds the model as the fit left it."""
    ctx = det.keras.init(runs_dir=tmp_path, seed=3)
    model, _ = oo.fit(ctx, "ema-adamw-schedule-global_clipnorm")
    averages = [np.asarray(v) for v in model.optimizer.variables
                if "average" in _compat.variable_name(v)]
    assert len(averages) == 4
    assert_arrays_equal([np.asarray(w) for w in model.trainable_weights], averages)
    loaded = ctx.load_checkpoint_model(trial_id=ctx.trial_id)
    assert_arrays_equal(model.get_weights(), loaded.get_weights())


@pytest.mark.skipif(not oo.K3, reason="SwapEMAWeights is Keras 3's")
def test_swapping_averages_in_between_epochs_is_refused_naming_the_callback(
        tmp_path: Path) -> None:
    ctx = det.keras.init(runs_dir=tmp_path, seed=3)
    swap = keras.callbacks.SwapEMAWeights(swap_on_epoch=True)
    with pytest.raises(UsageError, match=r"SwapEMAWeights\[0\], SwapEMAWeights\(swap_on_epoch"):
        oo.fit(ctx, "ema-adamw-schedule-global_clipnorm", [swap])


def test_determined_callback_saves_the_averages_a_fit_with_ema_ends_on(tmp_path: Path) -> None:
    """The script's own model.fit with DeterminedCallback: Keras overwrites the weights by
    their averages as the fit ends; the last checkpoint holds them."""
    make, _ = oo.VARIANTS["ema-adamw-schedule-global_clipnorm"]
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer=make(), loss="mse")
    x, y = oo.data()
    with det.core.init(runs_dir=tmp_path, seed=1) as ctx:
        cb = det.keras.DeterminedCallback(ctx, checkpoint=None, continue_id=1)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb])
        path = ctx.checkpoint.checkpoint_path(ctx._session.latest_checkpoint)
    averages = [np.asarray(v) for v in model.optimizer.variables
                if "average" in _compat.variable_name(v)]
    assert_arrays_equal(model.get_weights(), averages)
    assert_arrays_equal(model.get_weights(), _checkpoint._read_arrays(path)["model"])
