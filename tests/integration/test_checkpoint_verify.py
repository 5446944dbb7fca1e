"""A checkpoint's own metadata cannot switch off the check of its files (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.keras import _checkpoint  # noqa: E402


def _checkpoint_dir(tmp_path: Path) -> Path:
    ctx = det.keras.init(runs_dir=tmp_path, hparams={}, seed=1)
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    model.compile(ctx.wrap_optimizer(tf.keras.optimizers.SGD(0.1)), "mse")
    ctx.fit(model, x=x, y=x[:, :2], batch_size=16, epochs=1, verbose=0,
            validation_data=(x, x[:, :2]))
    return ctx.core.checkpoint.checkpoint_path(ctx.core.checkpoint.latest_checkpoint)


def _claim_format_1(path: Path, drop_checksums: bool = False) -> None:
    meta = json.loads((path / "metadata.json").read_text())
    meta["format_version"] = 1
    (path / "metadata.json").write_text(json.dumps(meta))
    if drop_checksums:
        (path / "checksums.json").unlink()


def _garble(path: Path) -> None:
    data = bytearray((path / "state.bin").read_bytes())
    data[: len(data) // 2] = b"\xff" * (len(data) // 2)
    (path / "state.bin").write_bytes(bytes(data))


def test_format_1_claim_does_not_skip_the_checksums(tmp_path: Path) -> None:
    path = _checkpoint_dir(tmp_path)
    _claim_format_1(path)
    _garble(path)
    with pytest.raises(det.errors.CheckpointCorruptError, match="checksum"):
        _checkpoint.load_model(path)


def test_a_current_checkpoint_without_its_checksums_is_refused(tmp_path: Path) -> None:
    """keras_major is written by the format-2 writer only: with it, a missing
    checksums.json is a damaged checkpoint, not a legacy one."""
    path = _checkpoint_dir(tmp_path)
    _claim_format_1(path, drop_checksums=True)
    _garble(path)
    with pytest.raises(det.errors.CheckpointCorruptError, match=r"checksums\.json is missing"):
        _checkpoint.load_model(path)


def test_a_genuine_format_1_checkpoint_is_read_unverified(tmp_path: Path) -> None:
    path = _checkpoint_dir(tmp_path)
    _claim_format_1(path, drop_checksums=True)
    meta = json.loads((path / "metadata.json").read_text())
    major = meta.pop("keras_major")
    (path / "metadata.json").write_text(json.dumps(meta))
    if major == 2:  # format 1 is Keras 2's: under Keras 3 it is refused as another Keras
        assert _checkpoint.read_metadata(path)["format_version"] == 1
    else:
        with pytest.raises(det.errors.CheckpointMismatchError):
            _checkpoint.read_metadata(path)
    assert not _checkpoint._must_verify(path)
