"""Slurm as the master's resource manager (issue 13), on a simulated 3-node cluster.

``scripts/slurm-sim.sh up`` starts Slurm (3 nodes x 2 CPUs on this machine; partitions
``debug``, all nodes, and ``one``, node1 only) once for the session; the tests skip,
saying why, where it cannot be installed or started. Each module master runs with
``--resource-manager slurm`` and a shared directory; trials and jobs are Slurm jobs.

- the proposal's train.py as a 4-slot trial over 2 nodes ends with the same weights on
  every rank, within 1e-5 of ``horovodrun -np 4`` on this one host with the same seed;
  batch inference then runs as a 4-rank job over 2 nodes and gathers in input order;
- an ASHA search on a 2-slot partition (the Core API tutorial's trials, no TensorFlow):
  trials wait in Slurm's queue (QUEUED, with Slurm's reason, in describe) and the search
  completes;
- pause, activate and kill of a running Slurm job; pause of a job still waiting;
- a master killed with kill -9 adopts its running jobs, and learns how one that ended
  while it was down ended;
- a two-rank streamed-predict job whose chief is killed with kill -9 at three points is
  launched again as new Slurm jobs, and one paused at a known batch and activated: each
  output equals an uninterrupted run's, bit for bit.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

import det_sdk
from det_sdk.launch.ports import unused_port
from harness.master import MODEL_DIR, Cluster, create, describe, wait_until
from tests.lifecycle_harness import Fakes
from tests.support import REPO, STEERED_JOB, steered_job_config, steered_job_reference

# Stack-neutral: Slurm is the master's resource manager; Keras trials are only the workload.
pytestmark = pytest.mark.stack_neutral

SIM = REPO / "scripts" / "slurm-sim.sh"
CORE_TUTORIAL = REPO / "tests" / "core_api_tutorial"  # trials without TensorFlow


def _free_port_range(n: int) -> int:
    """The first of ``n`` consecutive free ports (slurmctld's, then one per node)."""
    return unused_port(offsets=range(1, n))


@pytest.fixture(scope="session")
def slurm_conf() -> Iterator[str]:
    """The simulated cluster's SLURM_CONF; up for the whole session. The session's own
    (directory and ports): a user's (scripts/slurm-sim.sh up) and another test session's
    are left alone."""
    env = {**os.environ,
           "DET_SLURM_SIM_DIR": os.environ.get("DET_SLURM_TEST_DIR",
                                               f"/tmp/det-slurm-sim-tests-{os.getpid()}"),
           "DET_SLURM_SIM_PORT": str(_free_port_range(4))}
    try:
        out = subprocess.run(["bash", str(SIM), "up"], env=env, capture_output=True, text=True,
                             timeout=900)
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"Slurm tests skipped: scripts/slurm-sim.sh up did not finish ({err})")
    if out.returncode != 0:
        if "DET_SLURM_TEST_DIR" not in os.environ:
            shutil.rmtree(env["DET_SLURM_SIM_DIR"], ignore_errors=True)
        said = [line for line in out.stderr.splitlines() if line.startswith("[slurm-sim]")]
        why = (said or out.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"Slurm tests skipped: Slurm cannot be installed or started here ({why})")
    conf = out.stdout.strip().splitlines()[-1].removeprefix("export SLURM_CONF=")
    try:
        yield conf
    finally:
        subprocess.run(["bash", str(SIM), "down"], env=env, capture_output=True, timeout=120)
        if "DET_SLURM_TEST_DIR" not in os.environ:
            shutil.rmtree(env["DET_SLURM_SIM_DIR"], ignore_errors=True)


class SlurmCluster(Cluster):
    """A master whose resource manager is the simulated Slurm."""

    def __init__(self, root: Path, conf: str, *options: str) -> None:
        super().__init__(root, options=["--resource-manager", "slurm", "--shared-dir",
                                        str(root / "shared"), *options],
                         env={"SLURM_CONF": conf})
        self.shared = root / "shared"

    def squeue(self) -> dict[str, str]:
        """This user's Slurm jobs and their states (ended ones for a while too)."""
        out = subprocess.run(["squeue", "-h", "--me", "--states=all", "-o", "%i|%T"],
                             env=self.env, capture_output=True, text=True, check=True)
        return dict(line.split("|") for line in out.stdout.split())

    def allocations(self) -> list[dict]:
        db = sqlite3.connect(f"file:{self.data_dir / 'master.db'}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in db.execute("SELECT * FROM allocations ORDER BY started")]
        finally:
            db.close()

    def stop(self) -> None:
        self.down()
        jobs = [a["rm_id"] for a in self.allocations() if a["rm_id"] and a["state"] == "RUNNING"]
        if jobs:  # what a failing test left behind
            subprocess.run(["scancel", *jobs], env=self.env, capture_output=True)


@contextlib.contextmanager
def slurm_master(root: Path, conf: str, *options: str) -> Iterator[SlurmCluster]:
    c = SlurmCluster(root, conf, *options)
    c.up()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def slurm(slurm_conf: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A master on the whole cluster (partition debug: 3 nodes, 6 CPU slots)."""
    with slurm_master(tmp_path_factory.mktemp("slurm"), slurm_conf) as c:
        yield c


@pytest.fixture(scope="module")
def one(slurm_conf: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A master on partition one: 1 node, 2 CPU slots (tasks queue in Slurm)."""
    with slurm_master(tmp_path_factory.mktemp("one"), slurm_conf, "--partition", "one") as c:
        yield c


def ranks_by_node(log: str) -> dict[str, list[int]]:
    """What the ranks said on start: ``det_sdk: rank R of N on NODE``."""
    nodes: dict[str, list[int]] = {}
    for rank, node in re.findall(r"det_sdk: rank (\d+) of \d+ on (\S+)", log):
        nodes.setdefault(node, []).append(int(rank))
    return {n: sorted(r) for n, r in nodes.items()}


# --- the proposal's train.py: 4 slots over 2 nodes, as 4 processes on one --------------------

RUN_TRAIN = '''\
"""Runs the proposal's train.py as it is, then saves this rank's final weights."""
import os
import runpy
from pathlib import Path

import numpy as np

g = runpy.run_path(str(Path(__file__).with_name("train.py")), run_name="__main__")
context = g["context"]
out = Path(context.config_data["weights_dir"])
out.mkdir(parents=True, exist_ok=True)
np.savez(out / f"rank{context.distributed.rank}.npz", *g["model"].get_weights())
'''


def _weights(folder: Path) -> list[list[np.ndarray]]:
    out = []
    for rank in range(4):
        with np.load(folder / f"rank{rank}.npz") as f:
            out.append([f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))])
    return out


@pytest.fixture(scope="module")
def four_slots(slurm: SlurmCluster, mnist_npz: Path,
               tmp_path_factory: pytest.TempPathFactory) -> dict:
    """examples/train.py as one 4-slot trial under Slurm, and as horovodrun -np 4 here."""
    from tests.e2e.test_horovod import HOROVODRUN, horovodrun

    if not HOROVODRUN.exists():
        pytest.skip("horovodrun not installed")
    d = tmp_path_factory.mktemp("four")
    model = d / "model"
    model.mkdir()
    shutil.copy(REPO / "examples" / "train.py", model / "train.py")
    (model / "run_train.py").write_text(RUN_TRAIN)
    config = yaml.safe_load((REPO / "examples" / "const.yaml").read_text())
    config["hyperparameters"]["global_batch_size"] = 64  # 512 rows: 8 steps of 4 x 16
    config["searcher"]["max_length"] = {"epochs": 1}
    config["reproducibility"] = {"experiment_seed": 7}
    config["resources"] = {"slots_per_trial": 4}
    config["entrypoint_script"] = "python3 run_train.py"
    # the local run reads const.yaml beside train.py; the trial gets the same config
    (model / "const.yaml").write_text(yaml.safe_dump(
        {**config, "data": {"mnist_npz": str(mnist_npz), "weights_dir": str(d / "local")}}))
    path = d / "slurm.yaml"
    path.write_text(yaml.safe_dump(
        {**config, "data": {"mnist_npz": str(mnist_npz), "weights_dir": str(d / "slurm")}}))

    exp_id = create(slurm, path, model)
    out = slurm.det("experiment", "wait", str(exp_id), timeout=600)
    (trial,) = describe(slurm, exp_id)["trials"]
    log = slurm.det("trial", "logs", str(trial["id"])).stdout
    assert out.returncode == 0, log[-4000:]
    local = horovodrun(model / "run_train.py",
                       {"EPOCHS": "1", "DET_RUNS_DIR": str(d / "runs")}, np_=4, timeout=600)
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    return {"trial": trial, "log": log, "slurm": _weights(d / "slurm"),
            "local": _weights(d / "local"), "dir": d}


def test_a_four_slot_trial_spreads_over_two_nodes(four_slots: dict) -> None:
    assert four_slots["trial"]["state"] == "COMPLETED"
    nodes = ranks_by_node(four_slots["log"])
    # 2 CPUs a node: Slurm places 4 tasks on 2 nodes, ranks in blocks
    assert sorted(nodes.values()) == [[0, 1], [2, 3]], nodes


def test_every_rank_ends_with_the_same_weights_as_four_processes_on_one_node(
        four_slots: dict) -> None:
    slurm, local = four_slots["slurm"], four_slots["local"]
    for weights in (slurm, local):
        for rank in range(1, 4):
            for a, b in zip(weights[0], weights[rank], strict=True):
                np.testing.assert_array_equal(a, b)
    for a, b in zip(slurm[0], local[0], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert four_slots["trial"]["steps_completed"] == 8  # 512 rows, global batch 64


def test_batch_inference_as_a_two_node_job_gathers_in_input_order(
        slurm: SlurmCluster, four_slots: dict, mnist_npz: Path) -> None:
    trial_id = four_slots["trial"]["id"]
    preds_path = four_slots["dir"] / "preds.npy"
    job = {"entrypoint_script": "python3 batch_inference.py", "resources": {"slots": 4},
           "data": {"trial_id": trial_id, "batch_size": 16,
                    "predictions_path": str(preds_path)},
           # issue 23: the variable reaches every rank on both nodes (the script reads it)
           "environment": {"environment_variables": [f"MNIST_NPZ={mnist_npz}"]}}
    assert "MNIST_NPZ" not in os.environ
    path = four_slots["dir"] / "bi.yaml"
    path.write_text(yaml.safe_dump(job))
    out = slurm.det("job", "run", str(path), str(REPO / "examples"), "--follow", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert len(ranks_by_node(out.stdout)) == 2, out.stdout[-3000:]
    preds = np.load(preds_path)

    from det_sdk.keras._checkpoint import load_model

    with slurm.http() as http:
        ckpt = http.get(f"/api/v1/trials/{trial_id}/checkpoints",
                        params={"latest": "true"}).json()
    ckpt = ckpt[0] if isinstance(ckpt, list) else ckpt
    with np.load(mnist_npz) as f:
        x = np.expand_dims(f["x_test"].astype("float32") / 255, -1)
    model = load_model(Path(ckpt["path"]))
    np.testing.assert_allclose(preds, model.predict(x, verbose=0), atol=1e-6)


# --- searches queue in Slurm ---------------------------------------------------------------


def test_slots_beyond_the_partition_are_refused_naming_it(one: SlurmCluster) -> None:
    path = one.write_config("too-big", resources={"slots_per_trial": 3})
    out = one.det("experiment", "create", str(path), str(MODEL_DIR))
    assert out.returncode == 1
    assert ("resources.slots_per_trial: 3 is more than this master has (2 CPU slots in "
            "Slurm partition 'one' on 1 node)") in out.stderr


def test_an_asha_search_runs_with_trials_queued_by_slurm(one: SlurmCluster) -> None:
    """The Core API tutorial's search (tests/core_api_tutorial/3_hpsearch.py, no TensorFlow:
    Slurm's queue is what is tested; Keras trials under Slurm: the four-slot tests above, an
    ASHA search of Keras trials: test_search.py)."""
    config = one.write_config(
        "asha", reproducibility={"experiment_seed": 3}, entrypoint_script="python3 3_hpsearch.py",
        # the tutorial's unitless length: rungs at 30 and 60 of its 0.05 s steps
        searcher={"name": "adaptive_asha", "metric": "x", "smaller_is_better": True,
                  "max_length": 60, "max_trials": 4, "divisor": 2, "num_rungs": 2,
                  "mode": "aggressive"},
        hyperparameters={"increment_by": {"type": "int", "minval": 1, "maxval": 8}})
    exp_id = create(one, config, CORE_TUTORIAL)
    reasons: set[str] = set()
    deadline = time.time() + 600
    while (exp := describe(one, exp_id))["state"] == "ACTIVE":
        states = [t["state"] for t in exp["trials"]]
        reasons |= {t["queue_reason"] for t in exp["trials"] if t.get("queue_reason")}
        running = {t["id"] for t in exp["trials"] if t["state"] == "RUNNING"}
        if running:
            # describe shows RUNNING a trial whose job Slurm runs, or has just ended (until
            # the master reads its exit: a poll, and up to 3 s for the exit file), never one
            # Slurm holds back: that shows QUEUED with Slurm's reason. (Counting RUNNING
            # trials against the 2 CPUs is not it: 3 were seen at load ~30, one of them
            # ended.) Slurm's queue is read after describe: a job leaves PENDING only once.
            queue = one.squeue()
            jobs = {a["trial_id"]: a["rm_id"] for a in one.allocations()
                    if a["trial_id"] in running}  # each trial's latest job
            assert all(queue.get(job) != "PENDING" for job in jobs.values() if job), \
                (jobs, queue)
            assert list(queue.values()).count("RUNNING") <= 2  # the partition's 2 CPUs
        assert time.time() < deadline, states
        time.sleep(0.3)
    assert exp["state"] == "COMPLETED", exp["trials"]
    # 4 trials on 2 slots: Slurm held some back, and describe said why
    assert reasons & {"Resources", "Priority"}, reasons
    rungs = [r for t in exp["trials"] for r in t["rungs"]]
    assert len([r for r in rungs if r["rung"] == 0]) == 4
    assert any(not r["promoted"] for r in rungs if r["rung"] == 0)
    jobs = {a["rm_id"] for a in one.allocations() if a["trial_id"]}
    assert len(jobs) >= 4  # each trial (and each promotion's resume) a Slurm job


# --- pause, activate, kill; a master restart -------------------------------------------------


@pytest.fixture(scope="module")
def fakes(slurm: SlurmCluster) -> Fakes:
    return Fakes(slurm, slurm.root / "control")


def _job_of(cluster: SlurmCluster, trial_id: int) -> str:
    (alloc,) = [a for a in cluster.allocations()
                if a["trial_id"] == trial_id and a["state"] == "RUNNING"]
    return alloc["rm_id"]


def test_pause_activate_and_kill_a_running_slurm_job(slurm: SlurmCluster, fakes: Fakes) -> None:
    exp_id, trial_id, first = fakes.start_trial()
    job = _job_of(slurm, trial_id)
    assert slurm.squeue()[job] == "RUNNING"
    fakes.send(trial_id, "report")
    fakes.send(trial_id, "checkpoint")
    fakes.command(exp_id, "pause")
    assert fakes.send(trial_id, "preempted")["preempt"] is True  # the long-poll, as locally
    fakes.send(trial_id, "exit0")
    fakes.wait_state(exp_id, "PAUSED", "PAUSED")
    fakes.command(exp_id, "activate")
    second = fakes.wait_started(trial_id, after=first["allocation"])
    assert second["resumed_from"] == 1  # from its checkpoint, in a new Slurm job
    new_job = _job_of(slurm, trial_id)
    assert new_job != job
    fakes.command(exp_id, "kill")  # SIGTERM to the job's ranks (the fake dies of it)
    fakes.wait_state(exp_id, "CANCELED", "CANCELED", timeout=60)
    assert slurm.squeue().get(new_job, "gone") not in ("RUNNING", "PENDING")


def test_a_lower_priority_goes_to_slurm_as_nice(slurm: SlurmCluster, fakes: Fakes) -> None:
    """Issue 59: Slurm orders its own queue; the master passes resources.priority on as
    sbatch's --nice ((p - 42) * 100 above Determined's default, 0 at or below it)."""
    exp_id, trial_id, _ = fakes.start_trial(resources={"priority": 60})
    job = _job_of(slurm, trial_id)
    out = subprocess.run(["scontrol", "show", "job", job], env=slurm.env,
                         capture_output=True, text=True, check=True)
    assert "Nice=1800" in out.stdout, out.stdout
    fakes.command(exp_id, "kill")
    fakes.wait_state(exp_id, "CANCELED", "CANCELED", timeout=60)


STEERED_ROWS, STEERED_BATCH = 2000, 100


@pytest.fixture(scope="module")
def steered_reference(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """What the steered job writes uninterrupted: the reference of both streamed tests."""
    return steered_job_reference(tmp_path_factory.mktemp("steered") / "reference",
                                 rows=STEERED_ROWS, batch=STEERED_BATCH)


@pytest.fixture
def api(slurm: SlurmCluster) -> Iterator[httpx.Client]:
    """One client of the master's API for a test's polls (a client per poll loads the CA
    bundle again: CPU a poll every 0.1 s adds up)."""
    with slurm.http() as http:
        yield http


def _job(http: httpx.Client, job: int) -> dict:
    """What ``det job describe --json`` prints (the same GET), read in this process: the
    tests poll it, and a ``det`` process per poll costs about 0.2 s of CPU."""
    r = http.get(f"/api/v1/jobs/{job}")
    assert r.status_code == 200, r.text
    return r.json()


def _job_log(http: httpx.Client, job: int) -> str:
    """What ``det job logs`` prints, read in this process (polled, as :func:`_job`)."""
    r = http.get(f"/api/v1/jobs/{job}/logs", params={"offset": 0})
    assert r.status_code == 200, r.text
    return r.json()["text"]


def _job_ends(http: httpx.Client, job: int, *states: str, timeout: float) -> dict:
    return wait_until(f"job {job} {'/'.join(states)}", lambda: (
        lambda j: j if j["state"] in states else None)(_job(http, job)), timeout=timeout)


def test_a_streamed_job_killed_with_kill_9_at_three_points_resumes_exactly_once(
        slurm: SlurmCluster, api: httpx.Client, tmp_path: Path,
        steered_reference: np.ndarray) -> None:
    rows, batch = STEERED_ROWS, STEERED_BATCH
    # the output on the shared directory: every node writes its parts there
    out, killed = slurm.shared / "steered-out", slurm.shared / "killed"
    config = steered_job_config(tmp_path / "job.yaml", out, rows=rows, batch=batch,
                                max_restarts=3, slots=2, KILL_AT="5,2,3", KILLED=killed)
    created = slurm.det("job", "run", str(config), str(STEERED_JOB))
    assert created.returncode == 0, created.stderr
    job = int(created.stdout.split("Created job ")[1].split()[0])
    done = _job_ends(api, job, "COMPLETED", "ERROR", "CANCELED", timeout=600)
    log = slurm.det("job", "logs", str(job)).stdout
    assert (done["state"], done["restarts"]) == ("COMPLETED", 3), log[-3000:]
    described = slurm.det_json("job", "describe", str(job))  # det says what the API says
    assert (described["state"], described["restarts"]) == ("COMPLETED", 3), described
    assert killed.read_text().split() == ["5", "2", "3"]
    slurm_jobs = {a["rm_id"] for a in slurm.allocations() if a.get("job_id") == job}
    assert len(slurm_jobs) == 4, slurm.allocations()  # each launch its own Slurm job
    assert np.array_equal(det_sdk.load_predictions(out), steered_reference)


def test_a_streamed_job_paused_and_activated_on_slurm_resumes_exactly_once(
        slurm: SlurmCluster, api: httpx.Client, tmp_path: Path,
        steered_reference: np.ndarray) -> None:
    rows, batch = STEERED_ROWS, STEERED_BATCH
    out, gate = slurm.shared / "paused-out", tmp_path / "gate"
    # held at its 6th fetch (batch 4: the fingerprint reads batch 0 first) until paused
    config = steered_job_config(tmp_path / "job.yaml", out, rows=rows, batch=batch,
                                max_restarts=0, GATE=gate, GATE_AT=6)
    created = slurm.det("job", "run", str(config), str(STEERED_JOB))
    assert created.returncode == 0, created.stderr
    job = int(created.stdout.split("Created job ")[1].split()[0])

    def log() -> str:
        return _job_log(api, job)

    wait_until("the gate", lambda: "waiting at the gate" in log(), timeout=300)
    assert slurm.det_json("job", "pause", str(job)) == {"state": "STOPPING_PAUSED"}
    wait_until("the stop request", lambda: "the master asks this job to stop" in log(),
               timeout=60)
    gate.touch()
    paused = _job_ends(api, job, "PAUSED", "ERROR", "COMPLETED", timeout=300)
    assert (paused["state"], paused["rows_done"]) == ("PAUSED", 5 * batch), log()[-3000:]
    assert slurm.det_json("job", "activate", str(job)) == {"state": "QUEUED"}
    done = _job_ends(api, job, "COMPLETED", "ERROR", "CANCELED", timeout=300)
    assert (done["state"], done["rows_done"]) == ("COMPLETED", rows), log()[-3000:]
    assert f"RESULT {rows} {rows // batch} 5" in slurm.det("job", "logs", str(job)).stdout
    assert np.array_equal(det_sdk.load_predictions(out), steered_reference)


def test_a_job_waiting_in_slurms_queue_shows_queued_and_pauses_without_running(
        one: SlurmCluster) -> None:
    fakes = Fakes(one, one.root / "control")
    running = [fakes.start_trial() for _ in range(2)]  # the partition's 2 CPUs
    exp_id = fakes.create()
    trial_id = fakes.trial_of(exp_id)["id"]
    # submitted at once (2 x the partition's slots may be), held back by Slurm
    queued = wait_until("the trial to wait in Slurm's queue", lambda: (
        lambda t: t if t["state"] == "QUEUED" and t.get("queue_reason") in (
            "Resources", "Priority") else None)(fakes.trial_of(exp_id)), timeout=60)
    described = json.loads(one.det("trial", "describe", str(trial_id), "--json").stdout)
    assert described["state"] == "QUEUED" and described["queue_reason"] == queued["queue_reason"]
    text = one.det("experiment", "describe", str(exp_id)).stdout
    assert f"QUEUED ({queued['queue_reason']})" in text, text
    fakes.command(exp_id, "pause")
    fakes.wait_state(exp_id, "PAUSED", "PAUSED", timeout=30)  # cancelled in the queue
    assert fakes.process(trial_id) is None  # it never ran
    assert fakes.trial_of(exp_id)["restarts"] == 0
    for exp, tid, _ in running:
        fakes.send(tid, "finish")
        fakes.wait_state(exp, "COMPLETED", "COMPLETED")
    fakes.command(exp_id, "kill")
    fakes.wait_state(exp_id, "CANCELED", "CANCELED")


def test_a_master_killed_with_kill_9_adopts_its_slurm_jobs(slurm: SlurmCluster,
                                                           fakes: Fakes) -> None:
    exp_a, trial_a, _ = fakes.start_trial()
    exp_b, trial_b, first_b = fakes.start_trial(max_restarts=1)
    fakes.send(trial_a, "report")
    job_a = _job_of(slurm, trial_a)
    os.kill(int((slurm.data_dir / "master.pid").read_text()), 9)
    time.sleep(1)
    fakes.send(trial_b, "crash")  # dies while no master watches
    wait_until("the crashed job to end", lambda: slurm.squeue().get(
        _job_of(slurm, trial_b)) not in ("RUNNING", "COMPLETING"), timeout=60)
    slurm.up()
    # A: the same Slurm job, its token still good
    assert fakes.send(trial_a, "report")["steps"] == 2
    assert _job_of(slurm, trial_a) == job_a
    # B: its end was learnt from what the job recorded; restarted as a new job
    fakes.wait_started(trial_b, after=first_b["allocation"])
    assert fakes.trial_of(exp_b)["restarts"] == 1
    for exp, tid in ((exp_a, trial_a), (exp_b, trial_b)):
        fakes.send(tid, "finish")
        fakes.wait_state(exp, "COMPLETED", "COMPLETED")


FAILING_RANK = """\
import os
import time

import det_sdk as det

lr = det.get_cluster_info().trial.hparams["learning_rate"]
if os.environ["HOROVOD_RANK"] == "1":  # what slurm_step made of SLURM_PROCID
    raise ValueError(f"bad lr {lr}")
time.sleep(300)  # rank 0 waits, as in a collective its peer never joins: srun ends it
"""


def test_a_failing_rank_of_a_slurm_trial_is_the_trials_error(slurm: SlurmCluster,
                                                              tmp_path: Path) -> None:
    """Rank 1 of a 2-rank Slurm job raises: last_error leads with its exception and its
    line in train.py (the ranks run under det_sdk.launch.catch inside srun). The ranks
    import no TensorFlow: srun and the failure record are tested here (a failing Keras
    rank: test_cluster_faults.py; Keras ranks under srun: the four-slot tests above)."""
    model = tmp_path / "failing"
    model.mkdir()
    (model / "train.py").write_text(FAILING_RANK)
    raise_line = next(i for i, line in enumerate(FAILING_RANK.splitlines(), 1)
                      if "raise ValueError" in line)
    config = slurm.write_config("slurm-root-cause", max_restarts=0,
                                resources={"slots_per_trial": 2},
                                hyperparameters={"learning_rate": 7})
    exp_id = create(slurm, config, model)
    assert slurm.det("experiment", "wait", str(exp_id), timeout=400).returncode == 1
    (trial,) = describe(slurm, exp_id)["trials"]
    assert trial["last_error"].splitlines()[:2] == [
        "ValueError: bad lr 7", f"  at train.py:{raise_line}, in <module> (rank 1)"], \
        trial["last_error"]
