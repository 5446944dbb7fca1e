"""`det job describe/pause/activate/kill` and a job's max_restarts (issue 40), on a real
master with the real CLI: a streamed-predict job (tests/job_steering/run.py) is watched,
paused at a known batch and activated, crashed once and relaunched, killed, and left
writing its parts while the master is killed (SIGKILL) and started again. Each time its
output equals an uninterrupted run's, row for row (bit-equal, in order).

A two-slot job killed with kill -9 at three points resumes exactly once too, and the same
script launched as an experiment (a trial, crashed once) keeps its output with the trial.

The pause runs on both Keras stacks (where the streamed predict stops depends on its
input pipeline); the restart and the kill on the default one. The rest (every
transition, the progress arithmetic) runs without processes:
tests/integration/test_job_steering.py, tests/unit/test_job_progress.py.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import det_sdk
from harness.master import Cluster, api, read_log, run_to_the_end, wait_until
from tests.support import STEERED_JOB, pid_gone, steered_job_config, steered_job_reference

HERE = STEERED_JOB
ROWS, BATCH = 3000, 100  # 30 parts


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """An uninterrupted run's output (the script alone, no master)."""
    return steered_job_reference(tmp_path_factory.mktemp("reference"), rows=ROWS, batch=BATCH)


def _run(cluster: Cluster, tmp_path: Path, max_restarts: int, slots: int = 1,
         **env: Any) -> int:
    config = steered_job_config(tmp_path / "job.yaml", tmp_path / "out", rows=ROWS, batch=BATCH,
                                max_restarts=max_restarts, slots=slots, **env)
    out = cluster.det("job", "run", str(config), str(HERE))
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split("Created job ")[1].split()[0])


def _describe(cluster: Cluster, job: int) -> dict[str, Any]:
    """GET /api/v1/jobs/{id}, what `det job describe --json` prints, read in this process:
    a `det` process per poll cost about 0.2 s of CPU, which on 2 cores slowed the very jobs
    being waited for (`det job describe` itself is run once, in the pause test)."""
    r = api(cluster).get(f"/api/v1/jobs/{job}")
    assert r.status_code == 200, r.text
    return r.json()


def _log(cluster: Cluster, job: int) -> str:
    """The job's whole log, as `det job logs` prints it, read in this process for the same
    reason (`det job logs` itself: the pause test)."""
    return read_log(cluster, f"/api/v1/jobs/{job}/logs")


def _state(cluster: Cluster, job: int, *states: str, timeout: float = 120) -> dict[str, Any]:
    return wait_until(f"job {job} {'/'.join(states)}", lambda: (
        lambda j: j if j["state"] in states else None)(_describe(cluster, job)), timeout=timeout)


def test_a_paused_job_resumes_exactly_once(cluster: Cluster, tmp_path: Path,
                                           reference: np.ndarray) -> None:
    gate = tmp_path / "gate"
    # held at its 13th fetch: batch 11 (the input's fingerprint reads batch 0 first), so
    # 12 batches are done when it stops
    job = _run(cluster, tmp_path, 0, GATE=gate, GATE_AT=13)
    wait_until("the gate", lambda: "waiting at the gate" in _log(cluster, job), timeout=120)
    running = cluster.det_json("job", "describe", str(job))  # the CLI's, once
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
    listed = json.loads(cluster.det("job", "batches", "--json").stdout)
    assert next(j for j in listed if j["id"] == job)["progress"] == paused["progress"]
    assert "PAUSED" in cluster.det("job", "batches").stdout
    assert cluster.det_json("job", "activate", str(job)) == {"state": "QUEUED"}
    done = _state(cluster, job, "COMPLETED", "ERROR", "CANCELED")
    log = cluster.det("job", "logs", str(job)).stdout  # the CLI's, once
    assert log == _log(cluster, job)
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


@pytest.mark.stack_neutral  # the master's restarts; a killed predict resumes on both stacks
def test_a_two_slot_job_killed_with_kill_9_at_three_points_resumes_exactly_once(
        cluster: Cluster, tmp_path: Path, reference: np.ndarray) -> None:
    killed = tmp_path / "killed"
    # the chief dies at its 6th fetch, then its 3rd, then its 4th: three runs end at three
    # different points of the output, with parts of the other rank in flight each time
    job = _run(cluster, tmp_path, 3, slots=2, KILL_AT="6,3,4", KILLED=killed)
    done = _state(cluster, job, "COMPLETED", "ERROR", "CANCELED", timeout=400)
    log = _log(cluster, job)
    assert (done["state"], done["restarts"]) == ("COMPLETED", 3), log[-3000:]
    assert killed.read_text().split() == ["6", "3", "4"]
    assert (done["progress"], done["rows_done"]) == (1.0, ROWS)
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


@pytest.mark.stack_neutral  # the experiment form of the same streamed predict
def test_a_streamed_predict_as_an_experiment_restarts_and_keeps_its_output_with_the_trial(
        cluster: Cluster, tmp_path: Path, reference: np.ndarray) -> None:
    # the same script launched as Determined's examples launch batch inference: a trial of
    # a one-trial experiment, 2 slots, crashed once; a relative output= is the trial's file
    config = cluster.write_config(
        "streamed-experiment", entrypoint_script="python3 run.py", max_restarts=1,
        resources={"slots_per_trial": 2}, environment={"environment_variables": [
            f"ROWS={ROWS}", f"BATCH={BATCH}", "OUT=out", "CRASH_AT=5",
            f"CRASHED={tmp_path / 'crashed'}"]})
    _, described, trial, log = run_to_the_end(cluster, config, HERE, "the streamed trial",
                                              timeout=400)
    assert (described["state"], trial["restarts"]) == ("COMPLETED", 1), log[-3000:]
    assert (tmp_path / "crashed").exists()
    (manifest,) = cluster.root.rglob(f"trial_files/*/trial_{trial['id']}/out/manifest.json")
    out = manifest.parent
    assert np.array_equal(det_sdk.load_predictions(out), reference)


@pytest.mark.stack_neutral  # the master's crash; the predict itself is the same on both stacks
def test_a_job_writing_parts_outlives_a_master_killed_with_sigkill(
        cluster: Cluster, tmp_path: Path, reference: np.ndarray) -> None:
    gate = tmp_path / "gate"
    job = _run(cluster, tmp_path, 1, GATE=gate, GATE_AT=13, SLEEP=0.05)
    wait_until("the gate", lambda: "waiting at the gate" in _log(cluster, job), timeout=120)
    master = int((cluster.data_dir / "master.pid").read_text())
    gate.touch()  # released: from now on its parts are being written, 0.05 s a batch
    os.kill(master, signal.SIGKILL)
    wait_until("the master to be gone", lambda: pid_gone(master), timeout=30)
    # it predicts and writes on, with no master to report to
    wait_until("a part written with the master down", lambda: len(list(
        (tmp_path / "out").glob("part-*.json"))) > 12, timeout=60)
    cluster.up()
    done = _state(cluster, job, "COMPLETED", "ERROR", "CANCELED")
    log = _log(cluster, job)
    assert done["state"] == "COMPLETED", log[-3000:]
    # the same process wrote on and finished (the master re-attached to it): nothing
    # relaunched, no part written twice
    assert (done["rows_done"], done["restarts"]) == (ROWS, 0)
    assert f"RESULT {ROWS} {ROWS // BATCH} 0" in log
    assert np.array_equal(det_sdk.load_predictions(tmp_path / "out"), reference)

