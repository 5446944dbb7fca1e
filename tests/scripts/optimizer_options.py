"""Keras's optimizer options, trained by ``context.fit`` (issue 49).

Four variants cover every option, several to a variant (each ``context.fit`` costs a
trace: CI time is scarce): moving averages (``use_ema``, with and without
``ema_overwrite_frequency``), gradient accumulation, clipping (``clipnorm``,
``clipvalue``, ``global_clipnorm``), AdamW's weight decay, ``loss_scale_factor``, a
learning-rate schedule and a callable learning rate, XLA (``jit_compile=True``) and
``steps_per_execution``. Options Keras 2 lacks (accumulation, ``loss_scale_factor``,
callable learning rates) are left out there.

Imported by tests/integration/test_optimizer_options.py (each variant stopped in
mid-epoch and resumed, in-process); run as a script by tests/e2e/test_optimizer_options.py
on one process and under ``horovodrun -np 2``, training every variant in turn:

  OPTIONS_OUT   where rank 0 writes its report (JSON): per variant, the weights and
                optimizer variables after the fit, and its History
  DET_RUNS_DIR  as for any script
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

import det_sdk as det
from det_sdk.keras import _compat

keras = _compat.keras
K3 = _compat.KERAS_MAJOR >= 3
EPOCHS, BATCH, ROWS = 2, 8, 48  # 6 batches an epoch (global batch: 4 a process on 2)


def _keras3(**options: Any) -> dict[str, Any]:
    """``options`` on Keras 3; none on Keras 2 (which lacks them)."""
    return options if K3 else {}


def _decay() -> Any:
    return keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=4, decay_rate=0.5)


def _callable_lr() -> Any:
    """A callable learning rate (Keras 3): a function of no argument."""
    return tf.constant(0.08)


class WarmupThenCosine(keras.optimizers.schedules.LearningRateSchedule):
    """A schedule class of the script's own, unregistered (keras-io's habit: a linear
    warmup, then a cosine down to 0 at ``total``)."""

    def __init__(self, peak: float, warmup: int, total: int) -> None:
        super().__init__()
        self.peak, self.warmup, self.total = peak, warmup, total

    def __call__(self, step: Any) -> Any:
        step = tf.cast(step, tf.float32)
        cosine = 0.5 * self.peak * (1.0 + tf.cos(
            np.pi * (step - self.warmup) / float(self.total - self.warmup)))
        rising = self.peak * step / self.warmup
        return tf.where(step < self.warmup, rising, tf.where(step > self.total, 0.0, cosine))

    def get_config(self) -> dict[str, Any]:
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total}


#: name -> (the optimizer, model.compile's other keywords)
VARIANTS: dict[str, tuple[Callable[[], Any], dict[str, Any]]] = {
    # averages overwriting the weights every 4 steps (6 end epoch 0: not one of them),
    # accumulation over 3 steps, clipnorm, a loss scale factor
    "ema_overwrite-accumulation-clipnorm-loss_scale_factor": (
        lambda: keras.optimizers.Adam(
            0.05, use_ema=True, ema_momentum=0.9, ema_overwrite_frequency=4, clipnorm=0.05,
            **_keras3(gradient_accumulation_steps=3, loss_scale_factor=64.0)), {}),
    # averages kept apart until the fit ends, AdamW, a schedule, global_clipnorm
    "ema-adamw-schedule-global_clipnorm": (
        lambda: keras.optimizers.AdamW(_decay(), weight_decay=0.2, global_clipnorm=0.05,
                                       use_ema=True, ema_momentum=0.8), {}),
    # clipvalue, a callable learning rate, two steps per execution
    "clipvalue-callable_lr-steps_per_execution": (
        lambda: keras.optimizers.SGD(_callable_lr if K3 else 0.08, momentum=0.5,
                                     clipvalue=0.02), {"steps_per_execution": 2}),
    # issue 49 (keras-io's ports): the script's own warmup-cosine schedule class, AdamW
    # with clipnorm (better_knowledge_distillation, shiftvit, masked image modeling)
    "warmup_cosine_class-adamw-clipnorm": (
        lambda: keras.optimizers.AdamW(WarmupThenCosine(0.05, warmup=4, total=10),
                                       weight_decay=0.1, clipnorm=0.05), {}),
    # XLA (on the CPU) with averages overwriting the weights
    "jit_compile-ema_overwrite": (
        lambda: keras.optimizers.Adam(0.05, use_ema=True, ema_overwrite_frequency=4),
        {"jit_compile": True}),
}


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(ROWS, 4)).astype("float32")
    return x, np.tanh(x @ rng.normal(size=(4, 2)).astype("float32"))


def fit(context: Any, variant: str, callbacks: list[Any] | None = None) -> tuple[Any, Any]:
    """A small model compiled with ``variant``'s options, trained by ``context.fit``."""
    make, compile_kw = VARIANTS[variant]
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="tanh"),
                              keras.layers.Dense(2)])
    model.compile(optimizer=context.wrap_optimizer(make()), loss="mse", **compile_kw)
    x, y = data()
    xs, ys = context.wrap_data(x, y)
    hist = context.fit(model, x=xs, y=ys, epochs=EPOCHS,
                       batch_size=context.distributed.shard_batch_size(BATCH),
                       validation_data=(x[:16], y[:16]), verbose=0, callbacks=callbacks or [])
    return model, hist


def state(model: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The model's weights and its optimizer's variables (slots, averages, step count)."""
    variables = _compat.optimizer_variables(model.optimizer, model.trainable_variables)
    return ([np.asarray(w) for w in model.get_weights()],
            [np.asarray(_compat.backing_variable(v)) for v in variables])


def main() -> None:
    context = det.keras.init(seed=3, checkpoint_period=False)
    report: dict[str, Any] = {"size": context.distributed.size}
    for variant in VARIANTS:
        model, hist = fit(context, variant)
        weights, slots = state(model)
        report[variant] = {"weights": [w.tolist() for w in weights],
                           "slots": [s.tolist() for s in slots], "history": hist.history}
    if context.distributed.is_chief:
        with open(os.environ["OPTIONS_OUT"], "w") as out:
            json.dump(report, out)


if __name__ == "__main__":
    main()
