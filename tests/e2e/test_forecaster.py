"""Issue 28's forecaster, end to end: a windowed-series model with EarlyStopping and
ModelCheckpoint, ported with the README's lines only (tests/scripts/forecaster.py),
locally, stopped by SIGTERM and resumed, under ``horovodrun -np 2``, and on the
cluster with 1 and 2 slots. All slow: every run is a real process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.master import Cluster, run_to_the_end
from tests.e2e.test_horovod import HOROVODRUN, horovodrun
from tests.support import SCRIPTS, run_python

SCRIPT = SCRIPTS / "forecaster.py"


def _run(tmp: Path, name: str, processes: int = 1, **env: str) -> dict:
    work = tmp / name
    work.mkdir(exist_ok=True)
    out = work / "out.json"
    full = {"FORECAST_OUT": str(out), "DET_RUNS_DIR": str(tmp / name),
            "FORECAST_BEST": str(work / "best.keras"), **env}
    proc = horovodrun(SCRIPT, full, timeout=300) if processes > 1 else run_python(
        SCRIPT, full, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    return json.loads(out.read_text()) if out.exists() else {}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("forecast")
    result = _run(tmp, "whole")
    result["best"] = tmp / "whole" / "best.keras"
    return result


def test_early_stopping_ends_the_uninterrupted_run(uninterrupted: dict) -> None:
    # the scenario is one where the callbacks' state matters: stopped well before 30
    assert 3 <= len(uninterrupted["epochs"]) < 30
    assert uninterrupted["best"].is_file()


def test_sigterm_and_resume_train_what_the_uninterrupted_run_did(
        tmp_path: Path, uninterrupted: dict) -> None:
    stopped = _run(tmp_path, "run", FORECAST_STOP_EPOCH="1")
    assert stopped == {}  # stopped after epoch 1: no final weights written
    resumed = _run(tmp_path, "run", DET_RESUME="latest")
    assert resumed["epochs"] == uninterrupted["epochs"]  # EarlyStopping's wait/best resumed
    assert resumed["val_loss"] == uninterrupted["val_loss"]
    for a, b in zip(resumed["weights"], uninterrupted["weights"], strict=True):
        np.testing.assert_array_equal(np.array(a), np.array(b))
    # ModelCheckpoint's best is the same model's file (its "best" resumed, not reset):
    # each run loaded its file with Keras after its fit
    assert (tmp_path / "run" / "best.keras").is_file()
    for a, b in zip(resumed["best_weights"], uninterrupted["best_weights"], strict=True):
        np.testing.assert_array_equal(np.array(a), np.array(b))


@pytest.mark.skipif(not HOROVODRUN.exists(), reason="horovodrun not installed")
def test_two_processes_train_as_one(tmp_path: Path, uninterrupted: dict) -> None:
    """tf.data windows sharded over 2 processes: each step's union is one process's batch
    (2 x 16 rows). Adam divides by sqrt(v), which turns float rounding (a sum of two
    half-batch gradients is not the full-batch sum, bit for bit) into differences of
    ~4e-4 in the weights after one epoch (measured), so EarlyStopping's decision may
    move by an epoch: the curves are compared, not the bits (tests/e2e/test_same_on_n.py
    checks the bits with SGD)."""
    two = _run(tmp_path, "two", processes=2)
    assert two["size"] == 2
    assert abs(len(two["epochs"]) - len(uninterrupted["epochs"])) <= 2
    common = min(len(two["val_loss"]), len(uninterrupted["val_loss"]))
    np.testing.assert_allclose(two["val_loss"][:common], uninterrupted["val_loss"][:common],
                               rtol=2e-2)


@pytest.mark.parametrize("slots", [1, 2])
def test_on_the_cluster_it_completes_and_keeps_the_best_file(
        cluster: Cluster, tmp_path: Path, slots: int) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(SCRIPT, model_dir / "forecaster.py")
    config = cluster.write_config(
        f"forecast{slots}", entrypoint_script="python3 forecaster.py",
        resources={"slots_per_trial": slots}, hyperparameters={},
        searcher={"name": "single", "metric": "val_loss", "max_length": {"epochs": 30}})
    exp, info, trial, logs = run_to_the_end(cluster, config, model_dir, "forecaster")
    assert info["state"] == "COMPLETED", logs[-3000:]
    # EarlyStopping ended the fit before the searcher's 30 epochs (15 batches each), and
    # the trial is done all the same
    assert 0 < trial["steps_completed"] < 30 * 15
    kept = list(cluster.root.rglob(f"trial_files/{exp}/trial_{trial['id']}/best.keras"))
    assert len(kept) == 1, logs[-3000:]
