"""Writes the small MNIST-shaped npz the PyTorch tests train on (8x8, 10 classes, learnable)."""

import sys

import numpy as np


def make(path: str, n_train: int = 400, n_val: int = 120, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    protos = rng.normal(size=(10, 8, 8)).astype(np.float32)

    def split(n: int) -> tuple:
        y = rng.integers(0, 10, size=n)
        x = protos[y] + 0.8 * rng.normal(size=(n, 8, 8)).astype(np.float32)
        return x.astype(np.float32), y.astype(np.int64)

    x_train, y_train = split(n_train)
    x_val, y_val = split(n_val)
    np.savez(path, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)


if __name__ == "__main__":
    make(sys.argv[1])
