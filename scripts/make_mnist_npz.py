"""Write an MNIST-shaped .npz (x_train, y_train, x_test, y_test) for offline runs.

No data set can be downloaded on machines without internet; examples/train.py reads
this file instead of keras.datasets.mnist when MNIST_NPZ (or data.mnist_npz in the
config) names it. By default the digits are real: scikit-learn's handwritten digits
(1,797 of them, shipped inside the package) scaled up to MNIST's 28x28
(harness/digits.py); ``--synthetic`` writes generated, easily learnt ones of any size
instead (harness/mnist.py), as the benchmarks use.

    python scripts/make_mnist_npz.py det-runs/mnist-demo.npz              # real digits
    python scripts/make_mnist_npz.py x.npz --synthetic [--train 2048] [--test 512]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's harness/
from harness import digits, mnist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--synthetic", action="store_true",
                        help="generated digits (harness/mnist.py) instead of real ones")
    parser.add_argument("--train", type=int, default=2048, help="with --synthetic")
    parser.add_argument("--test", type=int, default=None,
                        help="test images (real: 360 of the 1,797; synthetic: 512)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.synthetic:
        data = mnist.make(args.train, 512 if args.test is None else args.test, args.seed)
        what = "generated"
    else:
        data = digits.load(360 if args.test is None else args.test, args.seed)
        what = "real handwritten (scikit-learn's digits, 28x28)"
    np.savez(args.path, **data)
    print(f"wrote {args.path}: {len(data['y_train'])} training and {len(data['y_test'])} "
          f"test images, {what}")


if __name__ == "__main__":
    main()
