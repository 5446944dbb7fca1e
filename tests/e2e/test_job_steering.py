"""`det job describe/pause/activate/kill` and a job's max_restarts (issue 40), on a real
master with the real CLI: a streamed-predict job (tests/job_steering/run.py) is watched,
paused at a known batch and activated, crashed once and relaunched, killed, and left
writing its parts while the master is killed (SIGKILL) and started again. Each time its
output equals an uninterrupted run's, row for row (bit-equal, in order).

The pause runs on both Keras stacks (where the streamed predict stops depends on its
input pipeline); the restart and the kill on the default one. The rest (every
transition, the progress arithmetic) runs without processes:
tests/integration/test_job_steering.py, tests/unit/test_job_progress.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import det_sdk
from det_sdk.env import outside
from harness.master import Cluster, wait_until
from tests.support import REPO

HERE = REPO / "tests" / "job_steering"
ROWS, BATCH = 3000, 100  # 30 parts


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """An uninterrupted run's output (the script alone, no master)."""
    tmp = tmp_path_factory.mktemp("reference")
    out = subprocess.run([sys.executable, str(HERE / "run.py")], cwd=tmp, capture_output=True,
                         text=True, timeout=300, env=outside(
                             TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO),
                             DET_RUNS_DIR=str(tmp / "runs"), OUT=str(tmp / "out"),
                             ROWS=str(ROWS), BATCH=str(BATCH)))
    assert out.returncode == 0, out.stderr[-3000:]
    return det_sdk.load_predictions(tmp / "out")


def _run(cluster: Cluster, tmp_path: Path, max_restarts: int, **env: Any) -> int:
    config = tmp_path / "job.yaml"
    variables = {"ROWS": ROWS, "BATCH": BATCH, "OUT": tmp_path / "out", **env}
    config.write_text(yaml.safe_dump({
        "name": "steered", "entrypoint_script": "python3 run.py", "max_restarts": max_restarts,
        "environment": {"environment_variables": [f"{k}={v}" for k, v in variables.items()]}}))
    out = cluster.det("job", "run", str(config), str(HERE))
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split("Created job ")[1].split()[0])


def _describe(cluster: Cluster, job: int) -> dict[str, Any]:
    return cluster.det_json("job", "describe", str(job))


def _log(cluster: Cluster, job: int) -> str:
    return cluster.det("job", "logs", str(job)).stdout


def _state(cluster: Cluster, job: int, *states: str) -> dict[str, Any]:
    return wait_until(f"job {job} {'/'.join(states)}", lambda: (
        lambda j: j if j["state"] in states else None)(_describe(cluster, job)), timeout=120)


def test_a_paused_job_resumes_exactly_once(cluster: Cluster, tmp_path: Path,
                                           reference: np.ndarray) -> None:
    gate = tmp_path / "gate"
    # held at its 13th fetch: batch 11 (the input's fingerprint reads batch 0 first), so
    # 12 batches are done when it stops
    job = _run(cluster, tmp_path, 0, GATE=gate, GATE_AT=13)
    wait_until("the gate", lambda: "waiting at the gate" in _log(cluster, job), timeout=120)
    running = _describe(cluster, job)
    assert running["state"] == "RUNNING" and running["output"] == str(tmp_path / "out")
    assert running["rows_total"] == ROWS and running["progress"] < 1
    paused = cluster.det_json("job", "pause", str(job))
    assert paused == {"state": "STOPPING_PAUSED"}
    wait_until("the stop request", lambda: "the master asks this job to stop" in
               _log(cluster, job), timeout=60)
    gate.touch()  # batch 11 is predicted; the job stops right after it
    paused = _state(cluster, job, "PAUSED", "ERROR", "COMPLETED")
    assert paused["state"] == "PAUSED", _log(cluster, job)[-3000:]
    # the 12 batches done are its progress (each part complete), and the master has it
    assert paused["rows_done"] == 12 * BATCH > running["rows_done"]
    assert paused["progress"] == pytest.approx(12 * BATCH / ROWS)
    listed = json.loads(cluster.det("job", "list", "--json").stdout)
    assert next(j for j in listed if j["id"] == job)["progress"] == paused["progress"]
    assert "PAUSED" in cluster.det("job", "list").stdout
    assert cluster.det_json("job", "activate", str(job)) == {"state": "QUEUED"}
    done = _state(cluster, job, "COMPLETED", "ERROR", "CANCELED")
    log = _log(cluster, job)
    assert done["state"] == "COMPLETED", log[-3000:]
    assert (done["progress"], done["rows_done"], done["restarts"]) == (1.0, ROWS, 0)
    assert "stopped by the master after 1200 of 3000 rows" in log
    assert f"RESULT {ROWS} {ROWS // BATCH} 12" in log  # 12 parts kept, 18 written
    assert np.array_equal(det_sdk.load_predictions(tmp_path / "out"), reference)


@pytest.mark.stack_neutral  # the master's restarts; a killed predict resumes on both stacks
def test_a_crashed_job_is_launched_again_and_resumes_exactly_once(
        cluster: Cluster, tmp_path: Path, reference: np.ndarray) -> None:
    job = _run(cluster, tmp_path, 1, CRASH_AT=17, CRASHED=tmp_path / "crashed")
    done = _state(cluster, job, "COMPLETED", "ERROR", "CANCELED")
    log = _log(cluster, job)
    assert (done["state"], done["restarts"]) == ("COMPLETED", 1), log[-3000:]
    assert "exited with code 3; launched again (1 of 1 restarts)" in log
    resumed = int(log.split(f"RESULT {ROWS} {ROWS // BATCH} ")[1].split()[0])
    assert 0 < resumed <= 16  # what was complete when it died is kept, the rest redone
    assert np.array_equal(det_sdk.load_predictions(tmp_path / "out"), reference)


@pytest.mark.stack_neutral  # the master and the CLI only
def test_a_killed_job_is_canceled(cluster: Cluster, tmp_path: Path) -> None:
    job = _run(cluster, tmp_path, 5, GATE=tmp_path / "never", GATE_AT=3)
    wait_until("the gate", lambda: "waiting at the gate" in _log(cluster, job), timeout=120)
    assert cluster.det_json("job", "kill", str(job))["state"] in ("STOPPING_CANCELED",
                                                                   "CANCELED")
    killed = _state(cluster, job, "CANCELED", "ERROR", "COMPLETED")
    assert (killed["state"], killed["restarts"]) == ("CANCELED", 0)
    assert cluster.det("job", "activate", str(job)).returncode != 0  # it has ended


@pytest.mark.stack_neutral  # the master's crash; the predict itself is the same on both stacks
def test_a_job_writing_parts_outlives_a_master_killed_with_sigkill(
        cluster: Cluster, tmp_path: Path, reference: np.ndarray) -> None:
    gate = tmp_path / "gate"
    job = _run(cluster, tmp_path, 1, GATE=gate, GATE_AT=13, SLEEP=0.05)
    wait_until("the gate", lambda: "waiting at the gate" in _log(cluster, job), timeout=120)
    master = int((cluster.data_dir / "master.pid").read_text())
    gate.touch()  # released: from now on its parts are being written, 0.05 s a batch
    os.kill(master, signal.SIGKILL)
    wait_until("the master to be gone", lambda: _gone(master), timeout=30)
    time.sleep(0.5)  # it predicts and writes on, with no master to report to
    assert len(list((tmp_path / "out").glob("part-*.json"))) > 12
    cluster.up()
    done = _state(cluster, job, "COMPLETED", "ERROR", "CANCELED")
    log = _log(cluster, job)
    assert done["state"] == "COMPLETED", log[-3000:]
    # the same process wrote on and finished (the master re-attached to it): nothing
    # relaunched, no part written twice
    assert (done["rows_done"], done["restarts"]) == (ROWS, 0)
    assert f"RESULT {ROWS} {ROWS // BATCH} 0" in log
    assert np.array_equal(det_sdk.load_predictions(tmp_path / "out"), reference)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
