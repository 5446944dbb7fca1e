"""A small MNIST-shaped data set, made here: no data set can be downloaded on these machines.

The digits are synthetic but learnable: each class is a fixed random stroke pattern plus
noise, so accuracy rises well above chance in one epoch. ``scripts/make_mnist_npz.py``
writes one to a file for examples/train.py.

>>> sorted(make(8, 4))
['x_test', 'x_train', 'y_test', 'y_train']
"""

from __future__ import annotations

import numpy as np


def make(n_train: int, n_test: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n_train`` and ``n_test`` 28x28 uint8 images with their labels (0-9)."""
    rng = np.random.default_rng(seed)
    prototypes = (rng.random((10, 28, 28)) > 0.8).astype(np.float32)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 10, size=n).astype(np.uint8)
        x = prototypes[y] * 200 + rng.random((n, 28, 28)) * 55
        return x.astype(np.uint8), y

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
