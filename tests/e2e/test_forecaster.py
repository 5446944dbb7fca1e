"""Issue 28's forecaster, end to end: a windowed-series model with EarlyStopping and
ModelCheckpoint, ported with the README's lines only (tests/scripts/forecaster.py),
on the cluster with 1 and 2 slots (the latter under ``horovodrun -np 2``; the
former the uninterrupted reference), and locally, stopped by SIGTERM and resumed. All
slow: every run is a real process."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.master import Cluster, run_to_the_end
from tests.e2e.test_horovod import HOROVODRUN
from tests.support import SCRIPTS, run_python

SCRIPT = SCRIPTS / "forecaster.py"


def _run(tmp: Path, name: str, **env: str) -> dict:
    work = tmp / name
    work.mkdir(exist_ok=True)
    out = work / "out.json"
    full = {"FORECAST_OUT": str(out), "DET_RUNS_DIR": str(tmp / name),
            "FORECAST_BEST": str(work / "best.keras"), **env}
    proc = run_python(SCRIPT, full, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    return json.loads(out.read_text()) if out.exists() else {}


@pytest.fixture(scope="module")
def on_cluster(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
               ) -> Callable[[int], dict]:
    """The forecaster as a trial with ``slots`` slots (1: one process; 2: ``horovodrun -np
    2``), run once per module and slot count: its experiment, trial, logs and rank 0's
    FORECAST_OUT report. Its ModelCheckpoint file keeps the script's relative default.

    The 1-slot run is the uninterrupted reference of the local SIGTERM/resume, the 2-slot
    run the two processes compared with it: a local run of each would train the same
    thing again, one more TensorFlow process (or two) per run."""
    runs: dict[int, dict] = {}

    def run(slots: int) -> dict:
        if slots not in runs:
            tmp = tmp_path_factory.mktemp(f"forecast{slots}")
            model_dir = tmp / "model"
            model_dir.mkdir()
            shutil.copy(SCRIPT, model_dir / "forecaster.py")
            out = tmp / "out.json"
            config = cluster.write_config(
                f"forecast{slots}", entrypoint_script="python3 forecaster.py",
                resources={"slots_per_trial": slots}, hyperparameters={},
                searcher={"name": "single", "metric": "val_loss", "max_length": {"epochs": 30}},
                environment={"environment_variables": [f"FORECAST_OUT={out}"]},
                # a trial's seed is its experiment's (the single searcher's one trial), not
                # init(seed=3)'s: the local runs' seed, to train what they train
                reproducibility={"experiment_seed": 3})
            exp, info, trial, logs = run_to_the_end(cluster, config, model_dir, "forecaster")
            runs[slots] = {"exp": exp, "info": info, "trial": trial, "logs": logs,
                           "out": json.loads(out.read_text()) if out.exists() else {}}
        return runs[slots]

    return run


@pytest.fixture(scope="module")
def uninterrupted(cluster: Cluster, on_cluster: Callable[[int], dict]) -> dict:
    """The 1-slot trial's report; ``best``: the ModelCheckpoint file its trial kept."""
    one = on_cluster(1)
    assert one["info"]["state"] == "COMPLETED", one["logs"][-3000:]
    result = dict(one["out"])
    kept = list(cluster.root.rglob(f"trial_files/{one['exp']}/trial_{one['trial']['id']}/"
                                   "best.keras"))
    result["best"] = kept[0] if kept else cluster.root / "missing-best.keras"
    return result


@pytest.mark.timeout(600)  # the first holds the master's start and the 1-slot trial
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
@pytest.mark.timeout(600)  # the first to ask for the 2-slot trial holds its launch
def test_two_processes_train_as_one(on_cluster: Callable[[int], dict],
                                    uninterrupted: dict) -> None:
    """tf.data windows sharded over 2 processes: each step's union is one process's batch
    (2 x 16 rows). Adam divides by sqrt(v), which turns float rounding (a sum of two
    half-batch gradients is not the full-batch sum, bit for bit) into differences of
    ~4e-4 in the weights after one epoch (measured), so EarlyStopping's decision may
    move by an epoch: the curves are compared, not the bits (tests/e2e/test_same_on_n.py
    checks the bits with SGD)."""
    two = on_cluster(2)["out"]
    assert two["size"] == 2
    assert abs(len(two["epochs"]) - len(uninterrupted["epochs"])) <= 2
    common = min(len(two["val_loss"]), len(uninterrupted["val_loss"]))
    np.testing.assert_allclose(two["val_loss"][:common], uninterrupted["val_loss"][:common],
                               rtol=2e-2)


@pytest.mark.parametrize("slots", [1, 2])
def test_on_the_cluster_it_completes_and_keeps_the_best_file(
        cluster: Cluster, on_cluster: Callable[[int], dict], slots: int) -> None:
    run = on_cluster(slots)
    exp, info, trial, logs = run["exp"], run["info"], run["trial"], run["logs"]
    assert info["state"] == "COMPLETED", logs[-3000:]
    assert run["out"]["size"] == slots
    # EarlyStopping ended the fit before the searcher's 30 epochs (15 batches each), and
    # the trial is done all the same
    assert 0 < trial["steps_completed"] < 30 * 15
    kept = list(cluster.root.rglob(f"trial_files/{exp}/trial_{trial['id']}/best.keras"))
    assert len(kept) == 1, logs[-3000:]
