"""The model and data of the pause benchmark, shared by its trial (train.py) and its reference.

A Dense stack on MNIST-shaped generated data (784 inputs, 10 classes), trained with
Adam so that a checkpoint holds optimizer slots too. ``params`` sets its size.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

INPUTS, CLASSES, HIDDEN = 784, 10, 2


def width_for(params: int) -> int:
    """Hidden width ``w`` such that the stack has about ``params`` parameters."""
    # (INPUTS*w + w) + (HIDDEN-1)*(w*w + w) + (w*CLASSES + CLASSES) = params
    a = HIDDEN - 1
    b = INPUTS + 1 + (HIDDEN - 1) + CLASSES
    c = CLASSES - params
    return max(8, round((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)))


def build_model(params: int, optimizer: tf.keras.optimizers.Optimizer | None = None
                ) -> tf.keras.Model:
    """A compiled Dense stack of about ``params`` parameters (Adam unless given)."""
    w = width_for(params)
    model = tf.keras.Sequential([
        tf.keras.Input((INPUTS,)),
        *[tf.keras.layers.Dense(w, activation="relu") for _ in range(HIDDEN)],
        tf.keras.layers.Dense(CLASSES, activation="softmax"),
    ])
    model.compile(optimizer or tf.keras.optimizers.Adam(1e-3),
                  "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def make_data(samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` random MNIST-shaped rows (float32, flattened) and integer labels."""
    rng = np.random.default_rng(seed)
    x = rng.random((samples, INPUTS), dtype=np.float32)
    y = rng.integers(0, CLASSES, samples)
    return x, y
