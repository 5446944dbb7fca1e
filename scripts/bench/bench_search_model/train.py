"""The trial of scripts/bench/bench_search.py: a small MLP on a generated two-spirals problem.

Hyperparameters: ``learning_rate`` (Adam), ``units`` (width of both hidden layers),
``dropout``, ``global_batch_size``. The data are the same for every trial (seed 0):
two interleaved spirals in 2 dimensions, 6 pure-noise features beside them, and
10% of the labels flipped, so the best reachable val_loss is well above 0 and a
bad learning rate or a too-narrow network shows. On the cluster the searcher sets
the length; locally ``EPOCHS`` (default 8):

    DET_RUNS_DIR=/tmp/runs .venv/bin/python scripts/bench/bench_search_model/train.py
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

import det_sdk as det

ROWS, VAL_ROWS, NOISE_FEATURES, LABEL_NOISE = 3000, 1000, 6, 0.10


def spirals(rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved spirals (1.5 turns each) with noise features and flipped labels."""
    label = rng.integers(0, 2, rows)
    t = rng.uniform(0.05, 1.0, rows)
    angle = 3 * np.pi * t + np.pi * label
    xy = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1)
    xy += rng.normal(scale=0.02, size=xy.shape)
    noise = rng.normal(scale=0.5, size=(rows, NOISE_FEATURES))
    flip = rng.random(rows) < LABEL_NOISE
    y = np.where(flip, 1 - label, label).astype("float32")[:, None]
    return np.concatenate([xy * 2, noise], axis=1).astype("float32"), y


tf.config.experimental.enable_op_determinism()
context = det.keras.init(hparams={"learning_rate": 0.01, "units": 64, "dropout": 0.0,
                                  "global_batch_size": 64})
hp = context.training.hparams

data_rng = np.random.default_rng(0)  # the same data for every trial, whatever its seed
x_train, y_train = spirals(ROWS, data_rng)
x_val, y_val = spirals(VAL_ROWS, data_rng)
x_train, y_train = context.wrap_data(x_train, y_train)
x_val, y_val = context.wrap_data(x_val, y_val)

units = int(hp["units"])
model = tf.keras.Sequential([
    tf.keras.Input((2 + NOISE_FEATURES,)),
    tf.keras.layers.Dense(units, activation="relu"),
    tf.keras.layers.Dropout(float(hp["dropout"])),
    tf.keras.layers.Dense(units, activation="relu"),
    tf.keras.layers.Dense(1, activation="sigmoid"),
])
optimizer = context.wrap_optimizer(tf.keras.optimizers.Adam(float(hp["learning_rate"])))
model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])

hist = context.fit(
    model, x=x_train, y=y_train,
    batch_size=context.distributed.shard_batch_size(int(hp["global_batch_size"])),
    epochs=int(os.environ.get("EPOCHS", "8")),  # the searcher's length on the cluster
    validation_data=(x_val, y_val), verbose=0,
)
if context.distributed.is_chief:
    print(f"val_loss {hist.history['val_loss'][-1]:.4f} "
          f"val_accuracy {hist.history['val_accuracy'][-1]:.4f}")
