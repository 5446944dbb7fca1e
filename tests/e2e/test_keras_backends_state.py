"""Keras 3 on JAX and PyTorch (issue 57's leftovers): the script's callbacks' state across a
stop and resume, and mixed precision on 2 processes and across a resume (a checkpoint
trained on TensorFlow loaded on JAX and PyTorch: tests/e2e/test_keras_backends.py). Real
processes running tests/scripts/keras_backend_fit.py on the real backends (CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_keras_backends import _result, _run

pytest.importorskip("jax")
pytest.importorskip("torch")

# EarlyStopping(patience=4, restore_best_weights) and ReduceLROnPlateau(patience=2) that
# count every epoch after the first as no improvement: the uninterrupted run halves the
# learning rate after epochs 2 and 4 and stops after epoch 4 with epoch 0's weights
CALLBACKS = {"CALLBACKS": "1", "EMA": "0", "EPOCHS": "8", "DROPOUT": "0"}


# One backend: the callbacks' state is kept by _neutral/_callbacks.py, which no backend
# class touches (its three runs on PyTorch too would add about 45 s of CPU to the suite)
@pytest.mark.parametrize("backend", ["jax"])
def test_callbacks_state_survives_a_stop_and_resume(backend: str, tmp_path: Path) -> None:
    (tmp_path / "ref").mkdir()
    whole = _run(tmp_path / "ref", backend, "ref", FIT_TWICE="1", **CALLBACKS)
    assert whole.returncode == 0, whole.stderr[-3000:]
    ref_w, ref_meta, _ = _result(tmp_path / "ref", "ref")
    # a second context.fit in the run is refused, naming the two ways to get it
    assert "KERAS_BACKEND=tensorflow" in ref_meta["second_fit"]
    assert "det.keras.init()" in ref_meta["second_fit"]
    assert len(ref_meta["history"]["loss"]) == 5  # EarlyStopping ended it after epoch 4
    assert ref_meta["learning_rate"] == pytest.approx(0.01 / 4)
    # 13 batches an epoch: batch 30 is inside epoch 2, with both callbacks waiting
    stopped = _run(tmp_path, backend, "stopped", KILL_AT="30", **CALLBACKS)
    assert "stopped by SIGTERM at epoch 2, batch 4" in stopped.stderr, stopped.stderr[-3000:]
    resumed = _run(tmp_path, backend, "resumed", DET_RESUME="latest", **CALLBACKS)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    weights, meta, _ = _result(tmp_path, "resumed")
    # the same epoch stopped at, the same learning rate, the best epoch's weights put back
    assert meta["history"] == ref_meta["history"]
    assert meta["learning_rate"] == ref_meta["learning_rate"]
    for a, b in zip(weights, ref_w):
        np.testing.assert_array_equal(a, b)


def _streamed(tmp: Path, name: str) -> np.ndarray:
    import det_sdk

    return np.asarray(det_sdk.load_predictions(tmp / name))


# mixed_bfloat16 on JAX (2 processes against 1, stop + resume) was checked by hand the same
# way; left out here to keep the suite's time: its code path is mixed_float16's on JAX
@pytest.mark.parametrize(("backend", "policy", "rtol"), [("jax", "mixed_float16", 2e-3),
                                                         ("torch", "mixed_bfloat16", 2e-2)])
def test_mixed_precision_two_processes_and_a_resume(backend: str, policy: str, rtol: float,
                                                    tmp_path: Path) -> None:
    # bfloat16 keeps 8 bits of mantissa: 2 processes sum their rows' gradients in another
    # order than 1, within bfloat16's round-off; mixed_float16 has a loss scale on JAX too
    env = {"MIXED": policy, "EMA": "0", "DROPOUT": "0", "EPOCHS": "2"}
    runs = {}
    for n in (1, 2):
        (tmp_path / str(n)).mkdir()
        done = _run(tmp_path / str(n), backend, "mixed", processes=n,
                    PREDICT_OUT=str(tmp_path / str(n) / "streamed"), **env)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[n] = _result(tmp_path / str(n), "mixed")
    for name, values in runs[1][1]["history"].items():
        np.testing.assert_allclose(runs[2][1]["history"][name], values, rtol=rtol, err_msg=name)
    # context.predict(..., output=) streamed every validation row in order, on 1 process
    # and shared between 2 (parts of 5 rows, the last of 3)
    for n in (1, 2):
        streamed = _streamed(tmp_path / str(n), "streamed")
        assert streamed.shape == (48, 1)
        np.testing.assert_allclose(streamed[:8], runs[n][2], rtol=1e-5, atol=1e-6)
    # stopped mid-epoch and resumed: bit-equal to the one-process run (the loss scale's
    # state is an optimizer variable)
    stopped = _run(tmp_path, backend, "stopped", KILL_AT="17", **env)
    assert "stopped by SIGTERM at epoch 1, batch 4" in stopped.stderr, stopped.stderr[-3000:]
    resumed = _run(tmp_path, backend, "resumed", DET_RESUME="latest", **env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    weights, meta, _ = _result(tmp_path, "resumed")
    assert meta["history"] == runs[1][1]["history"]
    for a, b in zip(weights, runs[1][0]):
        np.testing.assert_array_equal(a, b)
