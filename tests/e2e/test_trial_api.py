"""Determined's TFKerasTrial API on det_sdk (det_sdk.keras.TFKerasTrial and its runner).

Fast tests run tiny trials in this process (each data kind a loader may return, the
context's getters and wrappers, the errors). The slow ones run the seed tutorial's
MNISTTrial (examples/mnist_trial) with `python -m det_sdk.keras.trial` and on a real
master with 1 and 2 slots, pause and activate it, and read its metrics and
checkpoints back through the `det` CLI.

This module's other half, the tests that start no process: tests/integration/test_trial_api.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from det_sdk.keras import (
    _compat,
)
from harness.master import Cluster, create, describe, wait_until
from tests.support import REPO, read_jsonl

keras = _compat.keras
EXAMPLE = REPO / "examples" / "mnist_trial"


def _hard_mnist(path: Path, n_train: int = 256, n_test: int = 64) -> Path:
    """MNIST-shaped noise with random labels: it never trains to a loss of 0 (the
    generated digits do, within a few batches, and then the weights stop moving, so a
    comparison of final weights would prove nothing)."""
    r = np.random.default_rng(5)
    np.savez(path, x_train=r.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
             y_train=r.integers(0, 10, n_train, dtype=np.uint8),
             x_test=r.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
             y_test=r.integers(0, 10, n_test, dtype=np.uint8))
    return path


def _tutorial_config(path: Path, npz: Path, **overrides: Any) -> Path:
    cfg = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    cfg.update({"records_per_epoch": 256, "data": {"mnist_npz": str(npz)},
                "reproducibility": {"experiment_seed": 7},
                "checkpoint_storage": {"save_trial_latest": 100}})
    cfg["searcher"]["max_length"] = {"batches": 16}  # 2 epochs of 8 batches of 32
    cfg["min_validation_period"] = {"batches": 8}
    cfg.update(overrides)
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_tutorial_runs_locally_with_the_runner(tmp_path: Path) -> None:
    npz = _hard_mnist(tmp_path / "mnist.npz")
    config = _tutorial_config(tmp_path / "const.yaml", npz)
    env = {"DET_RUNS_DIR": str(tmp_path / "runs"), "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [sys.executable, "-m", "det_sdk.keras.trial", "model_def:MNISTTrial",
           "--config", str(config)]
    out = subprocess.run(cmd, cwd=EXAMPLE, env={**_env(), **env}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "runs" / "1"
    val = [m for m in read_jsonl(run / "metrics.jsonl") if m["group"] == "validation"]
    assert [m["steps_completed"] for m in val] == [8, 16]
    assert "val_accuracy" in val[-1]["metrics"]
    assert read_jsonl(run / "checkpoints.jsonl")[-1]["steps_completed"] == 16


def _env() -> dict[str, str]:

    from det_sdk.env import outside

    return outside(keep=["DET_RUNS_DIR"])


def _final_weights(cluster: Cluster, trial_id: int, processes: int = 1) -> list[np.ndarray]:
    """The weights of the trial's last checkpoint, listed by the `det` CLI."""
    from det_sdk.keras._checkpoint import load_weights, read_metadata

    out = cluster.det("checkpoint", "list", "--trial", str(trial_id), "--json")
    assert out.returncode == 0, out.stderr
    last = max(json.loads(out.stdout), key=lambda c: c["steps_completed"])
    assert last["steps_completed"] == 16
    assert read_metadata(Path(last["path"]))["processes"] == processes
    model = keras.Sequential([keras.layers.Flatten(input_shape=(28, 28)),
                              keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    load_weights(Path(last["path"]), model)
    return [np.asarray(w) for w in model.get_weights()]


SLOW_TRIAL = '''
import time
from pathlib import Path
import tensorflow as tf
from model_def import MNISTTrial
from det_sdk.keras import TFKerasTensorBoard


class Sleep(tf.keras.callbacks.Callback):
    """Sleeps after each batch; after the second, touches `started` (the test then pauses)."""

    def __init__(self, seconds, started):
        super().__init__()
        self.seconds, self.started = seconds, started

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)
        if batch >= 1 and self.started:
            Path(self.started).touch()


class SlowMNISTTrial(MNISTTrial):
    """The tutorial's trial, slowed down so that a test can pause it mid-run."""

    def keras_callbacks(self):
        data = self.context.get_data_config()
        return [Sleep(data.get("sleep_per_batch", 0), data.get("started")),
                TFKerasTensorBoard(update_freq="epoch")]
'''


def test_tutorial_on_the_cluster_one_and_two_slots_and_pause(cluster: Cluster,
                                                            tmp_path: Path) -> None:
    npz = _hard_mnist(tmp_path / "mnist.npz")
    model_dir = tmp_path / "mnist_trial"
    shutil.copytree(EXAMPLE, model_dir)
    (model_dir / "slow.py").write_text(SLOW_TRIAL)

    # 1 slot, the config carrying Determined fields det_sdk ignores: accepted, one warning
    one = _tutorial_config(tmp_path / "one.yaml", npz, environment={"image": "x"},
                           bind_mounts=[{"host_path": "/d", "container_path": "/d"}])
    out = cluster.det("experiment", "create", str(one), str(model_dir), "--json")
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "bind_mounts, environment.image" in warnings[0], out.stderr
    assert out.stderr.count("det_sdk ignores") == 1, out.stderr  # said once, not per parse
    exp_one = json.loads(out.stdout)["id"]
    two = _tutorial_config(tmp_path / "two.yaml", npz, resources={"slots_per_trial": 2})
    exp_two = create(cluster, two, model_dir)
    for exp in (exp_one, exp_two):
        assert cluster.det("experiment", "wait", str(exp)).returncode == 0, \
            cluster.det("experiment", "logs", str(exp)).stdout[-3000:]

    (t_one,) = describe(cluster, exp_one)["trials"]
    (t_two,) = describe(cluster, exp_two)["trials"]
    assert t_one["state"] == t_two["state"] == "COMPLETED"
    assert t_one["steps_completed"] == t_two["steps_completed"] == 16
    # metrics as the master shows them: training and validation every 8 batches
    trial = json.loads(cluster.det("trial", "describe", str(t_one["id"]), "--json").stdout)
    validations = [m for m in trial["metrics"] if m["group"] == "validation"]
    assert [m["steps_completed"] for m in validations] == [8, 16]
    assert "val_accuracy" in validations[-1]["metrics"]
    # the same global batch of 32 split over 2 processes: the same training
    w_one, w_two = _final_weights(cluster, t_one["id"]), _final_weights(cluster, t_two["id"], 2)
    for a, b in zip(w_one, w_two):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # measured: 1.1e-7

    # paused in the middle and activated: the weights of the uninterrupted run
    started = tmp_path / "started"
    slow = _tutorial_config(tmp_path / "slow.yaml", npz, entrypoint="slow:SlowMNISTTrial",
                            data={"mnist_npz": str(npz), "sleep_per_batch": 0.4,
                                  "started": str(started)})
    exp_slow = create(cluster, slow, model_dir)
    wait_until("the trial to train 2 batches", started.exists, timeout=180)
    assert cluster.det("experiment", "pause", str(exp_slow)).returncode == 0
    wait_until("PAUSED", lambda: describe(cluster, exp_slow)["state"] == "PAUSED",
               timeout=120)
    (t_paused,) = describe(cluster, exp_slow)["trials"]
    out = cluster.det("checkpoint", "list", "--trial", str(t_paused["id"]), "--json")
    paused_at = max(c["steps_completed"] for c in json.loads(out.stdout))
    assert 2 <= paused_at < 16  # stopped before the end, with a checkpoint there
    assert cluster.det("experiment", "activate", str(exp_slow)).returncode == 0
    assert cluster.det("experiment", "wait", str(exp_slow)).returncode == 0
    (t_slow,) = describe(cluster, exp_slow)["trials"]
    assert t_slow["state"] == "COMPLETED" and t_slow["restarts"] == 0
    for a, b in zip(w_one, _final_weights(cluster, t_slow["id"])):
        np.testing.assert_array_equal(a, b)
    # keras_callbacks' TFKerasTensorBoard wrote into the trial's TensorBoard storage
    storage = Path(json.loads(cluster.det("checkpoint", "list", "--trial", str(t_slow["id"]),
                                          "--json").stdout)[0]["path"]).parent
    events = list((storage / "tensorboard").rglob("keras/**/events.out.*"))
    assert events, f"no Keras TensorBoard events under {storage / 'tensorboard'}"


@pytest.mark.stack_neutral  # the master's ASHA; the trial itself runs on both stacks above
def test_tutorial_under_adaptive_asha(cluster: Cluster, tmp_path: Path) -> None:
    npz = _hard_mnist(tmp_path / "mnist.npz", n_train=128)
    config = _tutorial_config(
        tmp_path / "asha.yaml", npz, records_per_epoch=128,
        hyperparameters={"global_batch_size": {"type": "categorical", "vals": [16, 32]}},
        searcher={"name": "adaptive_asha", "metric": "val_accuracy", "smaller_is_better": False,
                  "max_length": {"epochs": 2}, "max_trials": 3, "num_rungs": 2, "divisor": 2,
                  "mode": "aggressive"})
    config_data = yaml.safe_load(config.read_text())
    del config_data["min_validation_period"]
    config.write_text(yaml.safe_dump(config_data))
    exp = create(cluster, config, EXAMPLE)
    assert cluster.det("experiment", "wait", str(exp)).returncode == 0, \
        cluster.det("experiment", "logs", str(exp)).stdout[-3000:]
    trials = describe(cluster, exp)["trials"]
    assert len(trials) == 3 and {t["state"] for t in trials} == {"COMPLETED"}
    # rung 1 at 1 epoch: the first result there always goes on, a later one only when it
    # ranks in the top half; every trial reported val_accuracy at its rung
    epochs = sorted(t["epoch"] for t in trials)
    assert epochs[-1] == 2 and set(epochs) <= {1, 2}
    for t in trials:
        assert t["steps_completed"] == t["epoch"] * 128 // t["hparams"]["global_batch_size"]
        assert t["best_metric"] is not None
