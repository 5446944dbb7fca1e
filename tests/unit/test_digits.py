"""The offline demo's data (harness/digits.py): real handwritten digits that scikit-learn
ships, laid out as MNIST is (28x28 uint8, the digit in a centred 20x20 box, 10 classes).

scripts/setup.sh extracts their file from scikit-learn's wheel; scikit-learn is not installed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness import digits


def test_the_digits_are_mnist_shaped_real_and_split_without_overlap() -> None:
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


def test_extract_takes_the_digits_out_of_a_wheel_or_writes_nothing(tmp_path: Path) -> None:
    import gzip
    import zipfile

    good = tmp_path / "good.whl"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr(digits.MEMBER, digits.DATA.read_bytes())
    assert digits.extract(good, tmp_path / "out" / "d.csv.gz").read_bytes() == \
        digits.DATA.read_bytes()
    short = tmp_path / "short.whl"  # a wheel whose file is cut
    with zipfile.ZipFile(short, "w") as z:
        z.writestr(digits.MEMBER, gzip.compress(b"0,1\n" * 10))
    with pytest.raises(ValueError, match="1,797 digits"):
        digits.extract(short, tmp_path / "cut.csv.gz")
    assert not list(tmp_path.glob("cut.csv.gz*"))
