"""The master's lifecycle (issue 11: L1, L2, L4, L5 and a master restart), end to end.

A real master on 127.0.0.1 and trials that are real processes (``tests/lifecycle_trial``,
no TensorFlow) doing exactly what each test tells them, so that every race the issue
describes is played in a chosen order. The transition table itself is tested in
``test_lifecycle.py``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sqlite3
import tarfile
from pathlib import Path

import pytest

from harness.master import wait_until
from tests.lifecycle_harness import TRIAL_DIR, Fakes, config, pid_gone

# Stack-neutral: TensorFlow-free trials drive the master's lifecycle.
pytestmark = pytest.mark.stack_neutral


def test_pause_shows_stopping_until_the_trial_has_stopped(fakes: Fakes) -> None:
    exp_id, trial_id, _proc = fakes.start_trial()
    fakes.send(trial_id, "checkpoint")
    assert fakes.command(exp_id, "pause")["state"] == "STOPPING_PAUSED"
    # the trial still runs: the experiment must not claim PAUSED yet (L1)
    assert fakes.send(trial_id, "preempted")["preempt"] is True
    exp = fakes.experiment(exp_id)
    assert (exp["state"], exp["trials"][0]["state"]) == ("STOPPING_PAUSED", "STOPPING_PAUSED")
    fakes.send(trial_id, "exit0")
    fakes.wait_state(exp_id, "PAUSED", "PAUSED")
    assert fakes.running_allocation(trial_id) is None
    fakes.command(exp_id, "kill")
    fakes.wait_state(exp_id, "CANCELED", "CANCELED")


def test_activate_while_the_trial_stops_runs_it_again(fakes: Fakes) -> None:
    """L1: pause, then activate before the trial has stopped: it runs again once stopped."""
    exp_id, trial_id, proc = fakes.start_trial()
    fakes.send(trial_id, "report")
    fakes.send(trial_id, "checkpoint")
    fakes.command(exp_id, "pause")
    assert fakes.command(exp_id, "activate")["state"] == "ACTIVE"
    assert fakes.trial_of(exp_id)["state"] == "STOPPING_PAUSED"  # true: it is stopping
    fakes.send(trial_id, "exit0")  # it obeys the pause it saw
    again = fakes.wait_started(trial_id, after=proc["allocation"])
    assert again["resumed_from"] == 1  # from its checkpoint
    fakes.wait_state(exp_id, "RUNNING", "ACTIVE")
    fakes.send(trial_id, "finish")
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")


def test_a_trial_that_finishes_during_a_pause_is_completed(fakes: Fakes) -> None:
    """L2: finished before it saw the pause: COMPLETED, and activate cannot relaunch it."""
    exp_id, trial_id, _proc = fakes.start_trial()
    fakes.send(trial_id, "report")
    fakes.command(exp_id, "pause")
    fakes.send(trial_id, "finish")
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")
    with fakes.http() as http:
        r = http.post(f"/api/v1/experiments/{exp_id}/activate")
    assert r.status_code == 409 and "COMPLETED" in r.json()["detail"]
    assert len(fakes.allocations(trial_id)) == 1  # never launched again


def test_a_trial_that_crashes_while_stopping_for_a_pause_is_paused(fakes: Fakes) -> None:
    exp_id, trial_id, proc = fakes.start_trial()
    fakes.send(trial_id, "checkpoint")
    fakes.command(exp_id, "pause")
    fakes.send(trial_id, "crash")
    exp = fakes.wait_state(exp_id, "PAUSED", "PAUSED")
    assert exp["trials"][0]["restarts"] == 1
    fakes.command(exp_id, "activate")
    assert fakes.wait_started(trial_id, after=proc["allocation"])["resumed_from"] == 0
    fakes.send(trial_id, "finish")
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")


def test_a_launch_that_fails_ends_the_trial_error_with_the_reason(fakes: Fakes) -> None:
    """L4: a launch that raises never leaves a trial RUNNING without a process."""
    with fakes.http() as http:
        # the newest experiment holds the newest trials (lists are paged, newest first)
        newest = http.get("/api/v1/experiments", params={"limit": 1}).json()["experiments"]
        last = max([t["id"] for e in newest for t in http.get(
            f"/api/v1/experiments/{e['id']}/trials", params={"limit": 1000}).json()["trials"]],
                   default=0)
    # the trial's directory cannot be created: its place is taken by a file
    trials_dir = fakes.cluster.data_dir / "trials"
    trials_dir.mkdir(exist_ok=True)
    (trials_dir / str(last + 1)).write_text("in the way")
    exp_id = fakes.create()
    exp = fakes.wait_state(exp_id, "ERROR", "ERROR")
    assert exp["trials"][0]["id"] == last + 1
    assert "launch failed" in exp["trials"][0]["last_error"]
    out = fakes.cluster.det("experiment", "describe", str(exp_id))
    assert "launch failed" in out.stdout and "NotADirectoryError" in out.stdout
    assert fakes.command(exp_id, "kill")["state"] == "ERROR"  # nothing to stop, no change
    assert fakes.allocations(last + 1) == []


@pytest.mark.parametrize("bad", ["link_chain", "hardlink_to_link", "long_name", "deep"])
def test_archives_that_would_fail_to_unpack_are_refused_at_create(fakes: Fakes,
                                                                  bad: str) -> None:
    """L4: archives that passed the check but failed to unpack are refused up front."""
    members: list[tarfile.TarInfo] = []

    def link(name: str, target: str, hard: bool = False) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
        info.linkname = target
        return info

    if bad == "link_chain":
        members = [link("s", "."), link("t", "s/..")]
    elif bad == "hardlink_to_link":
        members = [link("s", "a"), link("h", "s", hard=True)]
    elif bad == "long_name":
        members = [tarfile.TarInfo("x" * 5000)]
    else:
        members = [tarfile.TarInfo("/".join(["d"] * 2000) + "/f")]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            tar.addfile(m, io.BytesIO(b"") if m.isfile() else None)
    body = {"config": config(fakes.control), "model_definition":
            base64.b64encode(buf.getvalue()).decode()}
    with fakes.http() as http:
        r = http.post("/api/v1/experiments", json=body)
    assert r.status_code == 400, r.text
    assert "archive member" in r.json()["detail"]


def test_configs_that_cannot_reach_a_trial_are_refused_at_create(fakes: Fakes,
                                                                 tmp_path: Path) -> None:
    """L4: a config over the environment's limit, or a NUL in the entrypoint: refused by
    the CLI (before uploading) and by the master, naming the field."""
    import yaml

    cases = {"big": {"data": {"control_dir": "x", "blob": "a" * 200_000}},
             "nul": {"entrypoint_script": "python3 trial.py\x00 -c"}}
    for name, overrides in cases.items():
        raw = config(fakes.control, **overrides)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        out = fakes.cluster.det("experiment", "create", str(path), str(TRIAL_DIR))
        assert out.returncode == 1
        expected = "data (" if name == "big" else "entrypoint"
        assert expected in out.stderr, out.stderr
        with fakes.http() as http:
            r = http.post("/api/v1/experiments", json={"config": raw,
                                                       "model_definition": fakes.archive})
        assert r.status_code == 400 and expected in r.json()["detail"]


def test_more_slots_than_the_master_has_are_refused_and_block_nothing(fakes: Fakes) -> None:
    """L5: refused at create, naming the field; the next experiment runs."""
    cfg = fakes.cluster.root / "big.yaml"
    import yaml

    cfg.write_text(yaml.safe_dump(config(fakes.control, resources={"slots_per_trial": 3})))
    out = fakes.cluster.det("experiment", "create", str(cfg), str(TRIAL_DIR))
    assert out.returncode == 1
    assert "resources.slots_per_trial: 3 is more than this master has (2)" in out.stderr
    exp_id, trial_id, _ = fakes.start_trial()
    fakes.send(trial_id, "finish")
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")


def test_a_trial_left_stopping_without_a_process_ends_after_a_master_restart(
        fakes: Fakes) -> None:
    """L4: a trial STOPPING_CANCELED whose process is gone (the master died before it
    could record the exit) is CANCELED by the next master, not left for ever."""
    cluster = fakes.cluster
    exp_id, trial_id, proc = fakes.start_trial()
    master_pid = int((cluster.data_dir / "master.pid").read_text())
    os.kill(master_pid, 9)
    wait_until("the master to die", lambda: pid_gone(master_pid))
    os.killpg(fakes.running_allocation(trial_id)["pid"], 9)
    wait_until("the trial to die", lambda: pid_gone(proc["pid"]))
    # what a master killed in the middle of `kill` leaves: the trial stopping, no process
    db = sqlite3.connect(cluster.data_dir / "master.db")
    with db:
        db.execute("UPDATE trials SET state = 'STOPPING_CANCELED' WHERE id = ?", (trial_id,))
        db.execute("UPDATE experiments SET state = 'STOPPING_CANCELED' WHERE id = ?", (exp_id,))
        db.execute("DELETE FROM allocations WHERE trial_id = ?", (trial_id,))
    db.close()
    cluster.up()
    fakes.wait_state(exp_id, "CANCELED", "CANCELED", timeout=30)


def test_an_experiment_left_stopping_after_its_trials_ended_settles_on_restart(
        fakes: Fakes) -> None:
    """A master that died between a trial's CANCELED and its experiment's transition:
    the next master settles the experiment from its trials instead of leaving it
    STOPPING_CANCELED for ever."""
    cluster = fakes.cluster
    exp_id, trial_id, _proc = fakes.start_trial()
    fakes.command(exp_id, "kill")
    fakes.wait_state(exp_id, "CANCELED", "CANCELED")
    cluster.down()
    db = sqlite3.connect(cluster.data_dir / "master.db")
    with db:  # the experiment's last transition, lost
        db.execute("UPDATE experiments SET state = 'STOPPING_CANCELED', ended = NULL "
                   "WHERE id = ?", (exp_id,))
    db.close()
    cluster.up()
    exp = fakes.wait_state(exp_id, "CANCELED", "CANCELED", timeout=30)
    assert exp["trials"][0]["id"] == trial_id


def test_a_master_restart_keeps_a_running_trial_and_its_token(fakes: Fakes) -> None:
    cluster = fakes.cluster
    exp_id, trial_id, _proc = fakes.start_trial()
    fakes.send(trial_id, "report")
    master_pid = int((cluster.data_dir / "master.pid").read_text())
    os.kill(master_pid, 9)
    wait_until("the master to die", lambda: pid_gone(master_pid))
    cluster.up()
    assert fakes.send(trial_id, "report")["steps"] == 2  # adopted; its token still works
    fakes.send(trial_id, "finish")
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")
    with fakes.http() as http:
        rows = http.get(f"/api/v1/trials/{trial_id}/metrics").json()
    assert [r["steps_completed"] for r in rows] == [1, 2]


def test_describe_json_of_the_lifecycle_states(fakes: Fakes) -> None:
    """The CLI shows the states as the API does (STOPPING_PAUSED included)."""
    exp_id, trial_id, _ = fakes.start_trial()
    out = fakes.cluster.det("experiment", "pause", str(exp_id))
    assert out.returncode == 0 and "STOPPING_PAUSED" in out.stdout
    described = json.loads(fakes.cluster.det("experiment", "describe", str(exp_id),
                                             "--json").stdout)
    assert described["state"] == "STOPPING_PAUSED"
    fakes.send(trial_id, "exit0")
    fakes.wait_state(exp_id, "PAUSED", "PAUSED")
    assert fakes.cluster.det("experiment", "kill", str(exp_id)).returncode == 0
    fakes.wait_state(exp_id, "CANCELED", "CANCELED")


def test_a_job_whose_launch_fails_ends_error_and_says_why_in_its_log(fakes: Fakes,
                                                                     tmp_path: Path) -> None:
    """L4 for generic jobs: ERROR, the reason in `det job logs`, its upload deleted."""
    with fakes.http() as http:
        last = max([j["id"] for j in http.get("/api/v1/jobs", params={"limit": 1}).json()[
            "jobs"]], default=0)  # the newest job (lists are paged, newest first)
    # its working directory's place is taken by a file: the process cannot start there
    job_dir = fakes.cluster.data_dir / "jobs" / str(last + 1)
    job_dir.mkdir(parents=True)
    (job_dir / "workdir").write_text("in the way")
    config = tmp_path / "job.yaml"
    config.write_text("entrypoint_script: python3 trial.py\n")
    out = fakes.cluster.det("job", "run", str(config), str(TRIAL_DIR))
    assert out.returncode == 0, out.stderr
    with fakes.http() as http:
        job = wait_until("the job to end", lambda: (lambda j: j if j["state"] != "QUEUED" and
                                                    j["state"] != "RUNNING" else None)(
            http.get(f"/api/v1/jobs/{last + 1}").json()), timeout=30)
    assert job["state"] == "ERROR"
    logs = fakes.cluster.det("job", "logs", str(last + 1))
    assert "launch failed" in logs.stdout and "NotADirectoryError" in logs.stdout
    assert not list((fakes.cluster.data_dir / "uploads" / "jobs").glob("*.tar.gz"))


def test_a_preemption_long_poll_ends_when_its_allocation_ends(fakes: Fakes) -> None:
    """A process polling for preemption while the master ends its allocation (it
    exited, or was declared lost) hears "stop" at once, not after its timeout."""
    import threading
    import time

    exp_id, trial_id, proc = fakes.start_trial()
    answer: dict[str, object] = {}

    def poll() -> None:
        t0 = time.monotonic()
        with fakes.http() as http:
            r = http.get(f"/api/v1/allocations/{proc['allocation']}/signals/preemption",
                         params={"timeout_seconds": 30}, timeout=60)
        answer.update(status=r.status_code, body=r.json(), seconds=time.monotonic() - t0)

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.5)  # the poll waits
    assert "status" not in answer
    fakes.send(trial_id, "finish")
    wait_until("the allocation to end", lambda: not any(
        a["id"] == proc["allocation"] and a["state"] == "RUNNING"
        for a in fakes.allocations(trial_id)), timeout=30)
    poller.join(timeout=30)
    assert answer["status"] == 200 and answer["body"] == {"preempt": True}
    assert answer["seconds"] < 15, answer
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")
