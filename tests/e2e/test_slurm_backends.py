"""Keras 3 on JAX and on PyTorch under the Slurm resource manager (issue 57, item 2: "the
master's ``resources.slots_per_trial``, Slurm"), on the simulated cluster of
tests/e2e/test_slurm.py (3 nodes x 2 CPUs; its session fixture is shared).

The backend-neutral script of tests/e2e/test_keras_backends_cluster.py
(tests/scripts/keras_backend_cluster.py, dropout included) runs as a 2-slot trial whose
backend the config's ``environment.environment_variables`` picks, as users set it. Slurm
starts the ranks (``srun``, det_sdk's Slurm step turning ``SLURM_PROCID`` into the
launcher variables ``jax.distributed`` and ``torch.distributed`` meet by); the same script
and config run as 2 processes under ``torchrun`` on this host for the reference.

- JAX on 2 slots of one node ends with the weights and optimizer of the local
  2-process run, to round-off;
- PyTorch on 2 slots spread over 2 nodes (a master submitting with
  ``--ntasks-per-node=1``) the same;
- JAX on 2 slots over 2 nodes, paused mid-epoch and activated (a new Slurm job resumes
  the checkpoint), ends bit-equal to the uninterrupted one-node trial;
- every rank imports the det_sdk the master runs (the master's ``PYTHONPATH`` reaches
  the job's ranks).

All five runs start together (one module fixture): the module takes about as long as
its longest run, not their sum. Two bugs these found, fixed: rank 0 of a PyTorch group
over several nodes could not reach its own store (det_sdk.collectives.torch), and a
Slurm job's ranks lost the master's ``PYTHONPATH`` (det_sdk.master.resources.slurm).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.master import (
    create,
    describe,
    logs_on_failure,
    trial_logs,
    wait_for_experiment,
    wait_until,
)
from tests.e2e._backend_trials import arrays, backend_config, checkpoints, completed, last_arrays
from tests.e2e.test_slurm import SlurmCluster, slurm_conf, slurm_master
from tests.support import (
    REPO,
    SCRIPTS,
    assert_arrays_equal,
    keras3_installed,
    launched_env,
    launcher_argv,
)

# the module's runs happen in its first test's set-up: the simulated cluster's start, two
# masters, five runs at once on a loaded machine; bounded above the suite's 300 s default
pytestmark = [pytest.mark.skipif(not keras3_installed(), reason="JAX and PyTorch need Keras 3"),
              pytest.mark.timeout(900)]

__all__ = ["slurm_conf"]  # the session's simulated cluster (tests/e2e/test_slurm.py)

SCRIPT = SCRIPTS / "keras_backend_cluster.py"
BATCHES_PER_EPOCH = 13  # 200 rows in global batches of 16, the last one 8 rows
WHICH_DET_SDK = "import det_sdk; print(\"DET_SDK_AT\", det_sdk.__file__)"
# which det_sdk each rank imports, then the script
ENTRYPOINT = f"python3 -c '{WHICH_DET_SDK}' && python3 train.py"
TIMEOUT = 420  # one trial's bound: JAX's and torch's imports, 2 ranks, on a loaded machine


@pytest.fixture(scope="module")
def one_node(slurm_conf: str, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[SlurmCluster]:
    """A master on the whole cluster: Slurm packs a 2-slot trial on one node (2 CPUs)."""
    with slurm_master(tmp_path_factory.mktemp("one_node"), slurm_conf) as c:
        yield c


@pytest.fixture(scope="module")
def two_nodes(slurm_conf: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[SlurmCluster]:
    """A master whose jobs take one task a node: a 2-slot trial spans 2 nodes."""
    with slurm_master(tmp_path_factory.mktemp("two_nodes"), slurm_conf,
                      "--slurm-option=--ntasks-per-node=1") as c:
        yield c


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("slurm_backends") / "model"
    d.mkdir()
    shutil.copy(SCRIPT, d / "train.py")
    return d


def _config(path: Path, backend: str, **data: Any) -> Path:
    """A 2-slot, one-epoch experiment of the script on ``backend`` whose ranks first say
    which det_sdk they import."""
    return backend_config(path, backend, entrypoint=ENTRYPOINT, **data)


def _start_local(backend: str, model_dir: Path, tmp: Path) -> subprocess.Popen[bytes]:
    """The same script and config as 2 processes under torchrun on this host (it runs while
    the Slurm trials do: the module's time is the longest of them, not their sum)."""
    tmp.mkdir()
    config = _config(tmp / "local.yaml", backend)
    with (tmp / "out.txt").open("wb") as out:
        return subprocess.Popen(launcher_argv("torchrun", model_dir / "train.py", 2), cwd=tmp,
                                env=launched_env(KERAS_BACKEND=backend, DET_CONFIG=str(config),
                                                 DET_RUNS_DIR=str(tmp / "runs")),
                                stdout=out, stderr=subprocess.STDOUT)


def _local_arrays(proc: subprocess.Popen[bytes], backend: str, tmp: Path
                  ) -> dict[str, list[np.ndarray]]:
    """The local run's last checkpoint's arrays, once it has ended."""
    code = proc.wait(timeout=TIMEOUT)
    out = (tmp / "out.txt").read_text(errors="replace")
    assert code == 0, out[-4000:]
    assert out.count(f"KERAS_BACKEND_RAN {backend}") == 2, out[-4000:]
    (run,) = (tmp / "runs").iterdir()
    rows = [json.loads(line) for line in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert rows[-1]["steps_completed"] == BATCHES_PER_EPOCH, rows[-1]
    return arrays(run / "checkpoints" / rows[-1]["uuid"])


def _assert_trains_what_two_local_processes_train(slurm: dict[str, list[np.ndarray]],
                                                  local: dict[str, list[np.ndarray]]) -> None:
    assert set(slurm) == set(local), (set(slurm), set(local))
    for group in ("model", "optimizer:0"):
        assert len(slurm[group]) == len(local[group]) > 0
        for a, b in zip(slurm[group], local[group], strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5, err_msg=group)


def _jobs(log: str) -> list[str]:
    """Where each of the trial's Slurm jobs ran (its batch step's first line)."""
    return re.findall(r"det_sdk: Slurm job \d+: 2 ranks on (.*)", log)


def _job_of(cluster: SlurmCluster, trial_id: int) -> str:
    """The trial's latest Slurm job id."""
    jobs = [a["rm_id"] for a in cluster.allocations() if a["trial_id"] == trial_id]
    assert jobs and jobs[-1], jobs
    return str(jobs[-1])


def _trial_result(cluster: SlurmCluster, exp: int) -> dict:
    trial = completed(cluster, exp, TIMEOUT)
    log = trial_logs(cluster, trial["id"])
    described = cluster.det_json("trial", "describe", str(trial["id"]))
    return {"trial": trial, "log": log, "jobs": _jobs(log),
            "validations": [(m["steps_completed"], m["metrics"]) for m in described["metrics"]
                            if m["group"] == "validation"],
            "last": checkpoints(cluster, trial["id"])[-1],
            "arrays": last_arrays(cluster, trial["id"])}


@pytest.fixture(scope="module")
def runs(one_node: SlurmCluster, two_nodes: SlurmCluster, model_dir: Path,
         tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every run of the module, started together: JAX on one node, PyTorch over two, JAX
    over two paused mid-epoch and activated, and the two local references."""
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("runs")
    local = {b: _start_local(b, model_dir, tmp / f"local_{b}") for b in ("jax", "torch")}
    try:
        hold = tmp / "hold"
        hold.mkdir()
        # both ranks wait at epoch 0's 5th batch until the pause has reached the trial
        paused = create(two_nodes, _config(tmp / "paused.yaml", "jax",
                                           hold_at=[0, 4, str(hold)]), model_dir)
        jax_full = create(one_node, _config(tmp / "jax.yaml", "jax"), model_dir)
        torch_exp = create(two_nodes, _config(tmp / "torch.yaml", "torch"), model_dir)
        with logs_on_failure(two_nodes, paused):
            wait_until("the trial to hold at batch 5", (hold / "reached").exists,
                       timeout=TIMEOUT, every=0.2)
            (t,) = describe(two_nodes, paused)["trials"]
            first_job = _job_of(two_nodes, t["id"])
            assert two_nodes.det("experiment", "pause", str(paused)).returncode == 0
            wait_until("the trial to hear the pause", lambda: (
                "the master asks this trial to stop" in trial_logs(two_nodes, t["id"])),
                timeout=120, every=0.2)
            (hold / "release").touch()
            wait_for_experiment(two_nodes, paused, "the pause", timeout=TIMEOUT,
                                states=("PAUSED",))
            stopped = checkpoints(two_nodes, t["id"])
            assert two_nodes.det("experiment", "activate", str(paused)).returncode == 0
        out = {"jax": _trial_result(one_node, jax_full),
               "torch": _trial_result(two_nodes, torch_exp),
               "paused": {**_trial_result(two_nodes, paused), "stopped": stopped,
                          "first_job": first_job,
                          "job": _job_of(two_nodes, t["id"])},
               "local": {b: _local_arrays(p, b, tmp / f"local_{b}") for b, p in local.items()}}
    finally:
        for proc in local.values():
            if proc.poll() is None:  # what a failing fixture left behind
                proc.kill()
                proc.wait(timeout=60)
    return out


def test_jax_on_two_slots_of_one_node_trains_what_two_local_processes_train(
        runs: dict) -> None:
    jax = runs["jax"]
    assert len(jax["jobs"]) == 1 and re.fullmatch(r"node\d x2", jax["jobs"][0]), jax["jobs"]
    assert jax["log"].count("KERAS_BACKEND_RAN jax") == 2, jax["log"][-3000:]
    assert jax["trial"]["steps_completed"] == BATCHES_PER_EPOCH
    assert jax["last"]["keras_backend"] == "jax"
    _assert_trains_what_two_local_processes_train(jax["arrays"], runs["local"]["jax"])


def test_torch_on_two_slots_over_two_nodes_trains_what_two_local_processes_train(
        runs: dict) -> None:
    torch = runs["torch"]
    assert len(torch["jobs"]) == 1 and re.fullmatch(r"node\d x1, node\d x1",
                                                    torch["jobs"][0]), torch["jobs"]
    assert torch["log"].count("KERAS_BACKEND_RAN torch") == 2, torch["log"][-3000:]
    assert torch["trial"]["steps_completed"] == BATCHES_PER_EPOCH
    assert torch["last"]["keras_backend"] == "torch"
    _assert_trains_what_two_local_processes_train(torch["arrays"], runs["local"]["torch"])


def test_jax_over_two_nodes_paused_mid_epoch_and_activated_ends_bit_equal(runs: dict) -> None:
    paused, full = runs["paused"], runs["jax"]
    (stopped,) = paused["stopped"]  # the stop's checkpoint, inside epoch 0
    assert 5 <= stopped["steps_completed"] < BATCHES_PER_EPOCH, stopped
    assert "stopped by the master" in paused["log"]
    assert paused["trial"]["restarts"] == 0
    assert paused["job"] != paused["first_job"]  # resumed in a new Slurm job
    assert len(paused["jobs"]) == 2 and all(
        re.fullmatch(r"node\d x1, node\d x1", j) for j in paused["jobs"]), paused["jobs"]
    assert paused["trial"]["steps_completed"] == BATCHES_PER_EPOCH
    # the model, the optimizer, and both ranks' random states (the epoch's end: no
    # metric states to carry), and the validation the trial reported
    assert set(full["arrays"]) == set(paused["arrays"]) >= {
        "model", "optimizer:0", "rng:0", "rng:1"}
    assert paused["validations"] == full["validations"] != []
    for group in full["arrays"]:
        assert_arrays_equal(full["arrays"][group], paused["arrays"][group])


def test_every_rank_imports_the_masters_det_sdk(runs: dict) -> None:
    """The master's PYTHONPATH reaches the ranks (here: this checkout's det_sdk, not another
    one installed in the environment), as it does on the local resource manager."""
    for name in ("jax", "torch", "paused"):
        found = re.findall(r"DET_SDK_AT (\S+)", runs[name]["log"])
        assert len(found) == 2 * len(runs[name]["jobs"]), (name, found)
        assert set(found) == {str(REPO / "det_sdk" / "__init__.py")}, (name, found)
