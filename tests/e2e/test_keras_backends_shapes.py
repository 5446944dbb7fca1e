"""Keras 3 on JAX (issue 57), a shape of model tests/e2e/test_keras_backends.py does not
train: a functional convnet with BatchNormalization (non-trainable moving statistics) and
a custom layer written with ``keras.ops`` that draws noise from its own
``keras.random.SeedGenerator`` (the porting recipe's step 2, docs/backends.md). Stopped
mid-epoch and resumed, it must end bit-equal to the run never stopped: the checkpoint
carries the moving statistics and the generator's state.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.support import REPO, run_python

pytest.importorskip("jax")

SCRIPT = '''
import json, os
import keras
import numpy as np
from keras import layers, ops

import det_sdk as det


class NoisyScale(layers.Layer):
    """A learned per-channel scale, with Gaussian noise while training."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(11)

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, x, training=None):
        if training:
            x = x + 0.3 * keras.random.normal(ops.shape(x), seed=self.seed_generator)
        return x * self.scale


context = det.keras.init(hparams={"global_batch_size": 16}, seed=3)
rng = np.random.default_rng(0)
x = rng.normal(size=(96, 12, 2)).astype("float32")
y = (x[:, :, 0].mean(axis=1) > 0).astype("int64") + (x[:, :, 1].mean(axis=1) > 0.2)
x_val, y_val = x[:32], y[:32]
x, y = context.wrap_data(x, y)
inputs = keras.Input((12, 2))
h = layers.Conv1D(8, 3, padding="same")(inputs)
h = layers.BatchNormalization()(h)
h = NoisyScale()(layers.ReLU()(h))
outputs = layers.Dense(3, activation="softmax")(layers.GlobalAveragePooling1D()(h))
model = keras.Model(inputs, outputs)
model.compile(optimizer=context.wrap_optimizer(keras.optimizers.Adam(0.01)),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
kill_at = int(os.environ.get("KILL_AT", "0"))


class KillAt(keras.callbacks.Callback):
    seen = 0

    def on_train_batch_end(self, batch, logs=None):
        KillAt.seen += 1
        if kill_at and KillAt.seen == kill_at:
            os.kill(os.getpid(), 15)


history = context.fit(model, x, y, batch_size=16, epochs=3, validation_data=(x_val, y_val),
                      callbacks=[KillAt()], verbose=0)
out = os.environ["OUT"]
np.savez(out + ".npz", **{v.path: np.asarray(v) for v in model.weights})
with open(out + ".json", "w") as f:
    json.dump(history.history, f)
'''


def _run(tmp: Path, workdir: Path, out: str, **env: str) -> subprocess.CompletedProcess[str]:
    workdir.mkdir(exist_ok=True)
    return run_python(tmp / "convnet.py", {
        "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO), "DET_RUNS_DIR": str(workdir / "runs"),
        "OUT": str(tmp / out), **env}, cwd=workdir, timeout=180)


def _result(tmp: Path, out: str) -> tuple[dict[str, np.ndarray], dict[str, list[float]]]:
    with np.load(tmp / f"{out}.npz") as saved:
        weights = {name: saved[name] for name in saved.files}
    return weights, json.loads((tmp / f"{out}.json").read_text())


def test_convnet_with_batchnorm_and_seeded_noise_resumes_bit_equal_on_jax(tmp_path: Path
                                                                          ) -> None:
    (tmp_path / "convnet.py").write_text(SCRIPT)
    done = _run(tmp_path, tmp_path / "whole", "ref")
    assert done.returncode == 0, done.stderr[-3000:]
    ref_w, ref_h = _result(tmp_path, "ref")
    # 6 batches an epoch: the 8th is the second epoch's second
    stopped = _run(tmp_path, tmp_path / "stopped", "stopped", KILL_AT="8")
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert "stopped by SIGTERM at epoch 1, batch 2" in stopped.stderr, stopped.stderr[-3000:]
    assert not (tmp_path / "stopped.npz").exists()
    resumed = _run(tmp_path, tmp_path / "stopped", "resumed", DET_RESUME="latest")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    weights, history = _result(tmp_path, "resumed")
    assert history == ref_h
    assert len(history["val_loss"]) == 3
    # the moving statistics moved (so their restoring is tested) and every weight is equal
    moving = [name for name in ref_w if "moving_mean" in name]
    assert moving and np.any(ref_w[moving[0]] != 0)
    assert sorted(weights) == sorted(ref_w)
    for name, value in ref_w.items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)
