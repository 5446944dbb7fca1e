"""Write a small MNIST-shaped .npz (x_train, y_train, x_test, y_test) for offline runs.

No data set can be downloaded on machines without internet; examples/train.py reads
this file instead of keras.datasets.mnist when MNIST_NPZ (or data.mnist_npz in the
config) names it. The digits are synthetic but learnable (harness/mnist.py makes them).

    python scripts/make_mnist_npz.py det-runs/mnist-demo.npz [--train 2048] [--test 512]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's harness/
from harness.mnist import make


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
