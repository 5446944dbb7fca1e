"""Keras 3 on JAX and on PyTorch on the embedded master (issue 57): a backend-neutral script
(tests/scripts/keras_backend_cluster.py: ``import keras``, ``det.keras.init()``, ``context.fit``)
whose backend the experiment config's ``environment.environment_variables`` picks.

One master for the module, started with ``KERAS_BACKEND=tensorflow`` in its own
environment: a trial that ran on the config's backend got the config's variable over the
master's (before Python started: Keras reads it once, at import).

- JAX on 2 slots (horovodrun's ranks, ``jax.distributed``), a searcher length of 20
  batches (13 an epoch: it ends mid-epoch), paused mid-epoch and activated: the trial
  checkpoints where it stopped, exits, resumes there and ends with the bits, validations
  and searcher metric of the same experiment run without a pause;
- PyTorch on 1 slot with a length of 2 epochs (the script's ``epochs=1`` is not it): the
  trial ran on torch, as ``det trial describe``, ``det experiment describe``, the
  checkpoint's record and files and the web UI's data say.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.master import (
    Cluster,
    api,
    create,
    describe,
    logs_on_failure,
    running_cluster,
    trial_logs,
    wait_for_experiment,
    wait_until,
)
from tests.e2e._backend_trials import backend_config, checkpoints, completed, last_arrays
from tests.support import SCRIPTS, assert_arrays_equal, keras3_installed

pytestmark = pytest.mark.skipif(not keras3_installed(), reason="JAX and PyTorch need Keras 3")

SCRIPT = SCRIPTS / "keras_backend_cluster.py"
BATCHES_PER_EPOCH = 13  # 200 rows in global batches of 16
TIMEOUT = 240  # one trial's bound


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """This module's master; its own environment names another backend than the configs."""
    with running_cluster(tmp_path_factory.mktemp("cluster"),
                         env={"KERAS_BACKEND": "tensorflow"}) as c:
        yield c


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("keras_backends") / "model"
    d.mkdir()
    shutil.copy(SCRIPT, d / "train.py")
    return d


def _trial(cluster: Cluster, trial_id: int) -> dict:
    """`det trial describe --json`: the trial with its metric reports."""
    out = cluster.det_json("trial", "describe", str(trial_id))
    assert isinstance(out, dict)
    return out


def _validations(trial: dict) -> list[tuple[int, dict[str, float]]]:
    return [(m["steps_completed"], m["metrics"]) for m in trial["metrics"]
            if m["group"] == "validation"]


def test_jax_two_slots_paused_mid_epoch_and_activated_ends_bit_equal(
        cluster: Cluster, model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("jax")
    length = {"batches": 20}  # epoch 0 whole, then 7 batches of epoch 1
    full = create(cluster, backend_config(tmp_path / "full.yaml", "jax", slots=2,
                                          max_length=length), model_dir)
    hold = tmp_path / "hold"
    hold.mkdir()
    # both processes wait at epoch 0's 5th batch until the pause has reached the trial
    paused = create(cluster, backend_config(tmp_path / "paused.yaml", "jax", slots=2,
                                            max_length=length, hold_at=[0, 4, str(hold)]),
                    model_dir)
    with logs_on_failure(cluster, paused):
        wait_until("the paused trial to hold at batch 5", (hold / "reached").exists,
                   timeout=240, every=0.2)
        assert cluster.det("experiment", "pause", str(paused)).returncode == 0
        (t,) = describe(cluster, paused)["trials"]
        wait_until("the trial to hear the pause",
                   lambda: "the master asks this trial to stop" in trial_logs(cluster, t["id"]),
                   timeout=60, every=0.2)
        (hold / "release").touch()
        wait_for_experiment(cluster, paused, "the pause", timeout=120, states=("PAUSED",))
        stopped_at = checkpoints(cluster, t["id"])
        assert len(stopped_at) == 1  # the stop's checkpoint, inside epoch 0
        assert 5 <= stopped_at[0]["steps_completed"] < BATCHES_PER_EPOCH
        assert stopped_at[0]["keras_backend"] == "jax"
        logs = trial_logs(cluster, t["id"])
        assert "stopped by the master" in logs and "KERAS_BACKEND_RAN jax" in logs
        assert cluster.det("experiment", "activate", str(paused)).returncode == 0
    t_paused, t_full = completed(cluster, paused, TIMEOUT), completed(cluster, full, TIMEOUT)

    assert t_paused["restarts"] == t_full["restarts"] == 0
    a, b = _trial(cluster, t_full["id"]), _trial(cluster, t_paused["id"])
    for trial in (a, b):
        assert trial["steps_completed"] == 20 and trial["progress"] == 1.0
        assert trial["keras_backend"] == "jax"
        vals = _validations(trial)
        # each epoch's end and the length's end, mid-epoch 1
        assert [s for s, _ in vals] == [BATCHES_PER_EPOCH, 20]
        assert all("val_loss" in m and "val_accuracy" in m for _, m in vals)
        assert trial["best_metric"] == min(m["val_loss"] for _, m in vals)
        last = checkpoints(cluster, trial["id"])[-1]
        assert (last["steps_completed"], last["epoch"], last["batch"]) == (20, 1, 7)
    assert _validations(a) == _validations(b)
    full_arrays, paused_arrays = last_arrays(cluster, a["id"]), last_arrays(cluster, b["id"])
    # the model, the optimizer, and both processes' random and metric states
    assert set(full_arrays) == set(paused_arrays) == {
        "model", "optimizer:0", "rng:0", "rng:1", "metrics:0", "metrics:1"}
    for group in full_arrays:
        assert_arrays_equal(full_arrays[group], paused_arrays[group])


def test_torch_from_the_configs_environment_is_the_backend_shown(
        cluster: Cluster, model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    exp = create(cluster, backend_config(tmp_path / "torch.yaml", "torch", slots=1,
                                         max_length={"epochs": 2}), model_dir)
    t = completed(cluster, exp, TIMEOUT)
    assert "KERAS_BACKEND_RAN torch" in trial_logs(cluster, t["id"])
    trial = _trial(cluster, t["id"])
    assert trial["keras_backend"] == "torch"
    assert trial["steps_completed"] == 2 * BATCHES_PER_EPOCH  # the searcher's 2 epochs
    assert [s for s, _ in _validations(trial)] == [BATCHES_PER_EPOCH, 2 * BATCHES_PER_EPOCH]

    # the trial tables of `det trial describe` and `det experiment describe`
    for args in (("trial", "describe", str(t["id"])), ("experiment", "describe", str(exp))):
        text = cluster.det(*args).stdout
        lines = text.splitlines()
        header = next(i for i, ln in enumerate(lines) if ln.startswith("TRIAL "))
        column = lines[header].index("BACKEND")  # left-aligned, as wide as its widest cell
        row = lines[header + 1]
        assert row.split()[0] == str(t["id"]) and row[column:].split()[0] == "torch", text

    last = checkpoints(cluster, t["id"])[-1]
    assert last["keras_backend"] == "torch"
    described = cluster.det("checkpoint", "describe", last["uuid"]).stdout
    assert "keras_backend: torch" in described, described
    meta = json.loads((Path(last["path"]) / "metadata.json").read_text())
    assert meta["keras_backend"] == meta["framework"]["keras_backend"] == "torch"
    # what the web UI's trial page renders ("Keras on torch")
    ui = api(cluster).get(f"/ui/api/trials/{t['id']}")
    assert ui.status_code == 200 and ui.json()["keras_backend"] == "torch"
