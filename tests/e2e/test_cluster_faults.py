"""Faults on the cluster: trials killed with SIGKILL, a trial that dies while the master
is down, and Horovod trials paused at an epoch boundary.

Real end to end, as in test_cluster.py: a real master on 127.0.0.1 (one per module),
the real `det` CLI, trials that are real processes running TensorFlow. Nothing mocked.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from harness.master import Cluster, create, describe, wait_until
from tests.support import pid_gone

# Stack-neutral: the master's handling of faults; a Horovod pause on both stacks: test_horovod.py.
pytestmark = pytest.mark.stack_neutral

DEADLINE = 180.0  # seconds; generous for a loaded 2-core machine
STEPS_PER_EPOCH = 10  # tests/cluster_model: 160 samples, global batch 16


def _trial(cluster: Cluster, exp_id: int) -> dict:
    (trial,) = describe(cluster, exp_id)["trials"]
    return trial


def _trial_api(cluster: Cluster, trial_id: int) -> dict:
    with cluster.http() as http:
        return http.get(f"/api/v1/trials/{trial_id}").json()


def _checkpoints(cluster: Cluster, trial_id: int) -> list[dict]:
    with cluster.http() as http:
        return http.get(f"/api/v1/trials/{trial_id}/checkpoints").json()


def _metric_keys(cluster: Cluster, trial_id: int) -> list[tuple[str, int]]:
    with cluster.http() as http:
        rows = http.get(f"/api/v1/trials/{trial_id}/metrics").json()
    return [(r["group"], r["steps_completed"]) for r in rows]


def _allocations(cluster: Cluster, trial_id: int) -> list[dict]:
    db = sqlite3.connect(cluster.data_dir / "master.db")
    db.row_factory = sqlite3.Row
    try:
        rows = db.execute("SELECT * FROM allocations WHERE trial_id = ? ORDER BY started",
                          (trial_id,)).fetchall()
    finally:
        db.close()
    return [dict(r) for r in rows]


def _group(pgid: int) -> list[tuple[int, str]]:
    """The live processes of group ``pgid``: (pid, command line)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append((int(entry.name), cmdline))
    return out



def _assert_one_value_per_step(cluster: Cluster, trial_id: int, epochs: int) -> None:
    keys = _metric_keys(cluster, trial_id)
    assert len(keys) == len(set(keys)) == 2 * epochs, keys
    assert sorted(keys) == sorted((g, STEPS_PER_EPOCH * e) for e in range(1, epochs + 1)
                                  for g in ("training", "validation"))


def _start_until_checkpoint(cluster: Cluster, name: str, epochs: int,
                            **data: object) -> tuple[int, int, list[dict]]:
    """A one-trial experiment of ``epochs`` (1 s pause at each epoch end), once it has
    checkpointed: (experiment id, trial id, its checkpoints)."""
    config = cluster.write_config(name, searcher={
        "name": "single", "metric": "val_loss", "max_length": {"epochs": epochs}},
        data={"sleep_per_epoch": 1.0, **data})
    exp_id = create(cluster, config)
    trial_id = wait_until("the trial", lambda: describe(cluster, exp_id)["trials"])[0]["id"]
    known = wait_until("a first checkpoint", lambda: _checkpoints(cluster, trial_id))
    return exp_id, trial_id, known


def test_sigkilled_trial_restarts_from_its_latest_checkpoint(cluster: Cluster) -> None:
    epochs = 2
    exp_id, trial_id, _ = _start_until_checkpoint(cluster, "sigkill", epochs,
                                                  csv_log="logs/epochs.csv")
    (alloc,) = _allocations(cluster, trial_id)
    # kill -9 the training python only, as the OOM killer would; its shell survives it
    (pid,) = [p for p, cmd in _group(alloc["pid"]) if "train.py" in cmd and
              not cmd.startswith("sh ") and "det_sdk.launch.catch" not in cmd]
    os.kill(pid, signal.SIGKILL)

    out = cluster.det("experiment", "wait", str(exp_id), timeout=DEADLINE)
    assert out.returncode == 0, cluster.det("experiment", "logs", str(exp_id)).stdout[-3000:]
    trial = _trial(cluster, exp_id)
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 1
    first, second = _allocations(cluster, trial_id)
    assert first["exit_code"] == 128 + signal.SIGKILL  # the shell saw its child killed
    assert second["exit_code"] == 0
    # resumed, not restarted from scratch: that would have saved a second epoch-1 checkpoint
    ckpts = _checkpoints(cluster, trial_id)
    assert [(c["epoch"], c["batch"], c["steps_completed"]) for c in ckpts] == [
        (e, 0, STEPS_PER_EPOCH * e) for e in range(1, epochs + 1)]
    _assert_one_value_per_step(cluster, trial_id, epochs)
    # The CSVLogger's relative file is kept with the trial, not in its working directory;
    # the restart cut it back to its checkpoint and appended: one header, each epoch once.
    logs = cluster.det("experiment", "logs", str(exp_id)).stdout
    assert "callbacks' files are kept with the trial" in logs
    (csv,) = cluster.root.rglob(f"trial_files/{exp_id}/trial_{trial_id}/logs/epochs.csv")
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("epoch,") and [r.split(",")[0] for r in lines[1:]] == ["0", "1"]


def test_trial_that_dies_while_the_master_is_down_restarts(cluster: Cluster) -> None:
    epochs = 3
    exp_id, trial_id, known = _start_until_checkpoint(cluster, "dies-master-down", epochs)
    (alloc,) = _allocations(cluster, trial_id)

    master_pid = int((cluster.data_dir / "master.pid").read_text())
    os.kill(master_pid, signal.SIGKILL)
    os.killpg(alloc["pid"], signal.SIGKILL)  # the shell and the training python
    wait_until("the old master and the trial to be gone", lambda: pid_gone(master_pid) and not
           _group(alloc["pid"]) and pid_gone(alloc["pid"]), timeout=60)
    # the trial cannot have finished: it had (at least) one more epoch of >= 1 s to go
    assert not (Path(alloc["workdir"]).parent / f"{alloc['id']}.exit_code").exists()

    cluster.up()
    out = cluster.det("experiment", "wait", str(exp_id), timeout=DEADLINE)
    assert out.returncode == 0, cluster.det("experiment", "logs", str(exp_id)).stdout[-3000:]
    trial = _trial(cluster, exp_id)
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 1
    first, second = _allocations(cluster, trial_id)
    assert first["state"] == "EXITED" and first["exit_code"] != 0
    assert second["exit_code"] == 0
    ckpts = _checkpoints(cluster, trial_id)
    # what the first run had reported is kept, and the second continued from the latest of it
    assert [c["uuid"] for c in ckpts[:len(known)]] == [c["uuid"] for c in known]
    assert [(c["epoch"], c["batch"]) for c in ckpts] == [(e, 0) for e in range(1, epochs + 1)]
    _assert_one_value_per_step(cluster, trial_id, epochs)


HVD_EPOCHS, HVD_STEPS = 3, 5  # global batch 32: 5 steps per epoch
HVD = {"searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": HVD_EPOCHS}},
       "hyperparameters": {"learning_rate": 0.05, "global_batch_size": 32},
       "resources": {"slots_per_trial": 2},
       "reproducibility": {"experiment_seed": 42}}


@pytest.fixture(scope="module")
def rank_died(cluster: Cluster) -> int:
    """A 2-slot trial whose rank 1 exits with an error once, after its second epoch; the
    trial restarts from its checkpoint and completes. Run once for two tests: the restart's
    own, and the Horovod pause's, which must end with these final weights (hvd-full.npz):
    a trial resumed from its checkpoint, by a pause or by a restart, trains the bits of
    one run uninterrupted."""
    config = cluster.write_config(
        "rank-dies", **HVD, data={"fail_once_at_epoch": 1, "fail_rank": 1,
                                  "weights_out": str(cluster.root / "hvd-full.npz")})
    exp_id = create(cluster, config)
    out = cluster.det("experiment", "wait", str(exp_id), timeout=400)
    assert out.returncode == 0, cluster.det("experiment", "logs", str(exp_id)).stdout[-3000:]
    return exp_id


# (before the pause test: the rank_died fixture is made in this test's time, the
# pause test's own is its paused trial's)
def test_one_horovod_rank_dying_restarts_the_trial(cluster: Cluster, rank_died: int) -> None:
    """Rank 1 of 2 exits with an error after its second epoch: the whole trial restarts
    from a checkpoint and completes, with one metric value per step."""
    trial = _trial(cluster, rank_died)
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 1
    allocs = _allocations(cluster, trial["id"])
    assert len(allocs) == 2 and allocs[0]["exit_code"] != 0 and allocs[1]["exit_code"] == 0
    epochs = [c["epoch"] for c in _checkpoints(cluster, trial["id"])]
    assert epochs == [1, 2, 3]  # resumed after epoch 1's checkpoint, not from the start
    keys = _metric_keys(cluster, trial["id"])
    assert len(keys) == len(set(keys)) == 6
    assert sorted(keys) == sorted((g, HVD_STEPS * e) for e in range(1, HVD_EPOCHS + 1)
                                  for g in ("training", "validation"))


def test_horovod_paused_at_an_epoch_end_then_activated_continues_exactly(
        cluster: Cluster, rank_died: int) -> None:
    epochs, steps, common = HVD_EPOCHS, HVD_STEPS, HVD  # rank_died's: hvd-full.npz

    # Two processes decide to stop together every 10 batches and at each epoch end.
    # With 5 steps per epoch the first epoch's end comes before the first 10-batch
    # check, so a pause asked any time before it stops both processes exactly there:
    # ask as soon as the trial is launched (its processes are still starting), and
    # let them sit 1 s at the epoch end (Steer's sleep, before the epoch's checkpoint
    # and the stop check) so that the preemption poll has surely seen it by then.
    paused = cluster.write_config("hvd-paused", **common, data={
        "weights_out": str(cluster.root / "hvd-paused.npz"), "sleep_per_epoch": 1.0})
    exp_id = create(cluster, paused)
    trial = wait_until("the trial running", lambda: next(
        (t for t in describe(cluster, exp_id)["trials"] if t["state"] == "RUNNING"), None))
    assert trial["epoch"] == 0  # nothing trained yet
    assert cluster.det("experiment", "pause", str(exp_id)).returncode == 0
    wait_until("PAUSED", lambda: _trial_api(cluster, trial["id"])["state"] == "PAUSED", every=0.3)
    assert describe(cluster, exp_id)["state"] == "PAUSED"
    ckpts = _checkpoints(cluster, trial["id"])
    assert [(c["epoch"], c["batch"], c["steps_completed"]) for c in ckpts] == [
        (1, 0, steps)]  # an epoch boundary, before the end of training
    assert "stopped by the master (pause or kill) at epoch 1, batch 0" in cluster.det(
        "trial", "logs", str(trial["id"])).stdout

    assert cluster.det("experiment", "activate", str(exp_id)).returncode == 0
    out = cluster.det("experiment", "wait", str(exp_id), timeout=DEADLINE)
    assert out.returncode == 0, cluster.det("experiment", "logs", str(exp_id)).stdout[-3000:]
    trial = _trial(cluster, exp_id)
    assert trial["restarts"] == 0 and trial["steps_completed"] == steps * epochs
    assert len(_allocations(cluster, trial["id"])) == 2  # it did stop, and ran again
    # ... from its checkpoint: from scratch it would have saved a second epoch-1 one
    assert [(c["epoch"], c["batch"]) for c in _checkpoints(cluster, trial["id"])] == [
        (e, 0) for e in range(1, epochs + 1)]
    with np.load(cluster.root / "hvd-full.npz") as a, \
            np.load(cluster.root / "hvd-paused.npz") as b:
        assert sorted(a.files) == sorted(b.files) and a.files
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k])


def test_a_trial_relaunched_from_its_final_checkpoint_completes(cluster: Cluster) -> None:
    """Issue 11, L3: the process dies after its last epoch's checkpoint was reported,
    before the searcher heard the length was trained. The relaunch trains nothing,
    validates again at the last step (stored with that step's epoch), gets the whole
    run's History from ``fit`` (the script reads ``hist.history["val_loss"][-1]``) and
    the trial completes."""
    config = cluster.write_config(
        "final-checkpoint", data={"fail_once_at_train_end": True},
        searcher={"name": "single", "metric": "val_loss", "max_length": {"epochs": 2}})
    exp_id = create(cluster, config)
    assert cluster.det("experiment", "wait", str(exp_id), timeout=400).returncode == 0
    trial = _trial(cluster, exp_id)
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 1
    allocs = _allocations(cluster, trial["id"])
    assert [a["exit_code"] for a in allocs] == [3, 0]
    # the premise: the relaunch started from epoch 2's checkpoint (and took its own
    # checkpoint there before telling the searcher), not from epoch 1's
    assert [c["epoch"] for c in _checkpoints(cluster, trial["id"])] == [1, 2, 2]
    with cluster.http() as http:
        rows = http.get(f"/api/v1/trials/{trial['id']}/metrics").json()
    validation = [(r["steps_completed"], r["epoch"]) for r in rows
                  if r["group"] == "validation"]
    # 160 rows, batch 16: 10 steps an epoch; the re-validation at step 20 is epoch 2's
    assert validation == [(10, 1), (20, 2)]
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    assert "final val_loss" in logs and "epochs [0, 1]" in logs


# --- the root cause as the trial's error (issue 23) --------------------------------------

FAILING_MODEL = Path(__file__).parents[1] / "failing_model"
RAISE_LINE = next(i for i, line in enumerate(
    (FAILING_MODEL / "train.py").read_text().splitlines(), 1) if "raise ValueError" in line)


def _failing(cluster: Cluster, name: str, fail: str, slots: int = 1, **data: object) -> dict:
    """Run the failing model to its end (no restarts); its trial, and `experiment wait`'s
    stderr."""
    config = cluster.write_config(name, max_restarts=0, resources={"slots_per_trial": slots},
                                  data={"fail": fail, **data},
                                  hyperparameters={"learning_rate": 7})
    exp_id = create(cluster, config, FAILING_MODEL)
    out = cluster.det("experiment", "wait", str(exp_id), timeout=300)
    assert out.returncode == 1, out.stderr
    trial = _trial(cluster, exp_id)
    assert trial["state"] == "ERROR"
    return {**trial, "wait_stderr": out.stderr}


def test_a_two_slot_trial_leads_its_error_with_rank_1s_exception(cluster: Cluster) -> None:
    """Rank 1 raises ValueError("bad lr 7"); rank 0 waits in a collective: last_error, `det
    trial describe` and `det experiment wait` lead with rank 1's exception and its line in
    train.py, not with horovodrun's "one or more processes exited"."""
    trial = _failing(cluster, "root-cause-2", "value_error", slots=2, fail_rank=1)
    lines = trial["last_error"].splitlines()
    assert lines[:3] == ["ValueError: bad lr 7",
                         f"  at train.py:{RAISE_LINE}, in <module> (rank 1)",
                         '    raise ValueError(f"bad lr {lr}")'], trial["last_error"]
    assert "exited with code 1 after 0 restarts" in trial["last_error"]
    assert len(trial["last_error"]) <= 8000
    described = cluster.det("trial", "describe", str(trial["id"])).stdout
    error = described[described.index("\n\n") + 2:]
    assert error.startswith("ValueError: bad lr 7\n"), described
    assert f"trial {trial['id']}: ValueError: bad lr 7\n" in trial["wait_stderr"]


def test_a_one_slot_trial_leads_its_error_with_its_exception(cluster: Cluster) -> None:
    trial = _failing(cluster, "root-cause-1", "value_error")
    assert trial["last_error"].splitlines()[:2] == [
        "ValueError: bad lr 7", f"  at train.py:{RAISE_LINE}, in <module> (rank 0)"]


def test_an_import_error_before_init_and_a_segfault_are_the_trials_errors(
        cluster: Cluster) -> None:
    trial = _failing(cluster, "root-cause-import", "import_error")
    assert trial["last_error"].startswith(
        "ModuleNotFoundError: No module named 'det_sdk_has_no_such_module'\n"
        "  at train.py:"), trial["last_error"]
    trial = _failing(cluster, "root-cause-segv", "segfault")
    assert trial["last_error"].splitlines()[0] in (
        "killed by signal SIGSEGV", "exited with code 139 (signal SIGSEGV?)"), \
        trial["last_error"]


def test_a_failed_jobs_log_ends_with_its_root_cause(cluster: Cluster) -> None:
    job = cluster.root / "failing-job.yaml"
    job.write_text(json.dumps({"entrypoint_script": "python3 train.py",
                               "data": {"fail": "import_error"}}))
    out = cluster.det("job", "run", str(job), str(FAILING_MODEL), "--follow")
    assert out.returncode == 1
    tail = out.stdout.rstrip().splitlines()[-3:]
    assert re.fullmatch(r"det_sdk: job \d+ exited with code 1: ModuleNotFoundError: No module "
                        r"named 'det_sdk_has_no_such_module'", tail[0]), out.stdout[-2000:]
    assert tail[1].startswith("  at train.py:") and tail[1].endswith("(rank 0)")
