"""Real handwritten digits, MNIST-shaped, from a package (no download at run time):
the file behind scikit-learn's ``load_digits`` (1,797 scans of digits written by 43
people, 8x8 pixels, 0-16) scaled up to MNIST's layout: the digit in a 20x20 box centred
in 28x28, uint8 0-255.

scikit-learn itself is not installed: Keras imports it at start-up wherever it is
(``keras.wrappers``), and that cost every Keras process of the tests about 0.5 s of CPU.
``scripts/setup.sh`` downloads its wheel once and :func:`extract` copies the one data
file out of it, to :data:`DATA`.

The offline demo (``bash scripts/setup.sh --train``) trains examples/train.py on these:
real digits learn as real MNIST does, over epochs, where the generated set of
:mod:`harness.mnist` is near 1.0 after one. ``scripts/make_mnist_npz.py`` writes them.

>>> upscale(np.eye(8, dtype=np.float64) * 16).shape
(28, 28)
>>> int(upscale(np.full((8, 8), 16.0)).max()), int(upscale(np.zeros((8, 8))).max())
(255, 0)
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import zipfile
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("DET_DIGITS_CSV",
                           Path.home() / ".cache" / "det_sdk" / "digits.csv.gz"))
MEMBER = "sklearn/datasets/data/digits.csv.gz"  # its place inside scikit-learn's wheel

SIDE = 28  # MNIST's image
BOX = 20  # MNIST's digits fit a 20x20 box, centred in the 28x28 image


def _interpolation(n_out: int, n_in: int) -> np.ndarray:
    """The (n_out, n_in) matrix of linear interpolation between pixel centres."""
    pos = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5  # output centres in input pixels
    pos = np.clip(pos, 0, n_in - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    w = pos - lo
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lo] += 1 - w
    m[np.arange(n_out), hi] += w
    return m


def upscale(image: np.ndarray, levels: float = 16.0) -> np.ndarray:
    """One 8x8 image of intensities 0..``levels`` as MNIST's 28x28 uint8 (bilinear)."""
    a = _interpolation(BOX, image.shape[0])
    b = _interpolation(BOX, image.shape[1])
    box = a @ image @ b.T * (255.0 / levels)
    out = np.zeros((SIDE, SIDE), dtype=np.uint8)
    top = (SIDE - BOX) // 2
    out[top:top + BOX, top:top + BOX] = np.clip(np.rint(box), 0, 255).astype(np.uint8)
    return out


def load(n_test: int = 360, seed: int = 0) -> dict[str, np.ndarray]:
    """All 1,797 digits as x_train, y_train, x_test, y_test (MNIST's keys and dtypes):
    ``n_test`` of them, drawn at random with ``seed``, held out for validation."""
    if not DATA.is_file():
        raise FileNotFoundError(f"{DATA}: no digits; bash scripts/setup.sh extracts them")
    with gzip.open(DATA, "rt") as f:
        rows = np.loadtxt(f, delimiter=",")  # 64 pixels then the digit, a scan per row
    x = np.stack([upscale(img) for img in rows[:, :64].reshape(-1, 8, 8)])
    y = rows[:, 64].astype(np.uint8)
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:n_test], order[n_test:]
    return {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]}


def extract(wheel: Path, dest: Path = DATA) -> Path:
    """Copy the digits' file out of a scikit-learn wheel to ``dest`` (whole or not at all)."""
    with zipfile.ZipFile(wheel) as z:
        data = z.read(MEMBER)
    with gzip.open(io.BytesIO(data), "rt") as f:
        if len(f.read().splitlines()) != 1797:
            raise ValueError(f"{wheel}: {MEMBER} does not hold the 1,797 digits")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(data)
    part.replace(dest)
    return dest


if __name__ == "__main__":  # python -m harness.digits WHEEL: what scripts/setup.sh runs
    print(extract(Path(sys.argv[1])))
