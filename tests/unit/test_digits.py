"""The offline demo's data (harness/digits.py): real handwritten digits that scikit-learn
ships, laid out as MNIST is (28x28 uint8, the digit in a centred 20x20 box, 10 classes).

scikit-learn is the `demo` extra, in .venv only: these skip where it is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import digits


def test_the_digits_are_mnist_shaped_real_and_split_without_overlap() -> None:
    pytest.importorskip("sklearn")
    d = digits.load()
    assert d["x_train"].shape == (1437, 28, 28) and d["x_test"].shape == (360, 28, 28)
    assert d["x_train"].dtype == np.uint8 and d["y_train"].dtype == np.uint8
    assert set(np.unique(d["y_train"])) == set(range(10)) == set(np.unique(d["y_test"]))
    x = np.concatenate([d["x_train"], d["x_test"]])
    assert x[:, :4].max() == 0 and x[:, -4:].max() == 0  # MNIST's empty margin
    assert x.max() == 255 and 20 < x.mean() < 80  # ink on a dark background, as MNIST
    # no image both in training and in validation (the held-out accuracy means something)
    train = {img.tobytes() for img in d["x_train"]}
    assert not any(img.tobytes() in train for img in d["x_test"])
    # the same seed, the same split; another seed, another
    again = digits.load()
    np.testing.assert_array_equal(again["y_test"], d["y_test"])
    assert not np.array_equal(digits.load(seed=1)["y_test"], d["y_test"])


def test_upscale_keeps_the_strokes_where_they_were() -> None:
    image = np.zeros((8, 8))
    image[:, 0] = 16  # a stroke down the left edge
    big = digits.upscale(image)
    assert big[4:24, 4:6].min() > 200  # still the box's left edge
    assert big[4:24, 8:24].max() == 0  # nothing drawn elsewhere
