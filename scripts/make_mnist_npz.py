"""Write a small MNIST-shaped .npz (x_train, y_train, x_test, y_test) for offline runs.

No data set can be downloaded on machines without internet; examples/train.py reads
this file instead of keras.datasets.mnist when MNIST_NPZ (or data.mnist_npz in the
config) names it. The digits are synthetic but learnable: each class is a fixed
random stroke pattern plus noise, so accuracy rises well above chance in one epoch.

    python scripts/make_mnist_npz.py det-runs/mnist-demo.npz [--train 2048] [--test 512]
"""

from __future__ import annotations

import argparse

import numpy as np


def make(n_train: int, n_test: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    prototypes = (rng.random((10, 28, 28)) > 0.8).astype(np.float32)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 10, size=n).astype(np.uint8)
        x = prototypes[y] * 200 + rng.random((n, 28, 28)) * 55
        return x.astype(np.uint8), y

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--train", type=int, default=2048)
    parser.add_argument("--test", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    np.savez(args.path, **make(args.train, args.test, args.seed))
    print(f"wrote {args.path}: {args.train} training and {args.test} test images")


if __name__ == "__main__":
    main()
