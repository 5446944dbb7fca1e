"""The benchmarks' MNIST workload: MNIST-shaped data and the Keras MNIST convnet.

Shared by ``bench_fit_overhead`` and the Horovod benchmarks' worker, so that they
measure the same model on the same kind of data.

>>> data = mnist_like(256, 64)
>>> data["x"].shape, data["y"].shape
((256, 28, 28, 1), (256, 10))
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/
from harness.mnist import make


def mnist_like(n_train: int, n_val: int, seed: int = 0) -> dict[str, np.ndarray]:
    """MNIST-shaped float32 data (harness/mnist.py): x in [0, 1], one-hot y."""
    raw = make(n_train, n_val, seed)

    def prep(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (x.astype(np.float32) / 255)[..., None], np.eye(10, dtype=np.float32)[y]

    x_tr, y_tr = prep(raw["x_train"], raw["y_train"])
    x_va, y_va = prep(raw["x_test"], raw["y_test"])
    return {"x": x_tr, "y": y_tr, "x_val": x_va, "y_val": y_va}


def build_model() -> tf.keras.Model:
    """The Keras MNIST convnet (uncompiled)."""
    layers = tf.keras.layers
    return tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(10, activation="softmax"),
    ])
