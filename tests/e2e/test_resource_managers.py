"""Stops that outlive the master (issue 15), on a real local master (the resource
managers' pure helpers are tested in tests/unit/test_resource_managers.py).

A kill is a SIGTERM now and a forced stop after the grace. The deadline is recorded on
the allocation, so neither ``det master down`` right after a kill nor a master killed
with kill -9 leaves the task running: the master carries out the stops it promised
before it exits, and a master started after a crash carries out the ones it finds.
The trial here ignores SIGTERM, as a script stuck in a long native call does.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest

from det_sdk.master.archive import pack
from det_sdk.master.resources import KILL_GRACE_SECONDS
from harness.master import Cluster, wait_until
from tests.lifecycle_harness import pid_gone

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral

STUBBORN = """\
import json, os, signal, time
from pathlib import Path

signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only a SIGKILL ends it
out = Path(json.loads(os.environ["DET_EXPERIMENT_CONFIG"])["data"]["pid_file"])
tmp = out.with_name(out.name + ".tmp")
tmp.write_text(str(os.getpid()))
os.replace(tmp, out)
while True:
    time.sleep(0.1)
"""


class Stubborn:
    """A local master and one-trial experiments whose process ignores SIGTERM."""

    def __init__(self, root: Path) -> None:
        self.cluster = Cluster(root)
        model = root / "model"
        model.mkdir()
        (model / "stubborn.py").write_text(STUBBORN)
        self.archive = base64.b64encode(pack(model)).decode()
        self.root = root

    def start(self, name: str) -> tuple[int, int]:
        """An experiment whose trial runs; (experiment id, the trial process's pid)."""
        pid_file = self.root / f"{name}.pid"
        config = {"name": name, "entrypoint_script": "python3 stubborn.py",
                  "searcher": {"name": "single", "metric": "loss",
                               "max_length": {"batches": 10}},
                  "data": {"pid_file": str(pid_file)}}
        with self.cluster.http() as http:
            r = http.post("/api/v1/experiments",
                          json={"config": config, "model_definition": self.archive})
        assert r.status_code == 201, r.text
        pid = wait_until("the trial's process", lambda: pid_file.exists()
                         and pid_file.read_text().strip(), timeout=60, every=0.05)
        return r.json()["id"], int(pid)

    def kill(self, exp_id: int) -> float:
        """``det experiment kill``; when the forced stop falls due."""
        out = self.cluster.det("experiment", "kill", str(exp_id))
        assert out.returncode == 0, out.stderr
        return time.time() + KILL_GRACE_SECONDS

    def state(self, exp_id: int) -> str:
        with self.cluster.http() as http:
            return http.get(f"/api/v1/experiments/{exp_id}").json()["state"]


@pytest.fixture
def stubborn(tmp_path: Path):
    s = Stubborn(tmp_path)
    s.cluster.up()
    try:
        yield s
    finally:
        s.cluster.stop()


def test_master_down_right_after_a_kill_does_not_leave_the_task(stubborn: Stubborn) -> None:
    exp_id, pid = stubborn.start("down")
    due = stubborn.kill(exp_id)
    t0 = time.time()
    out = stubborn.cluster.det("master", "down", "--data-dir", str(stubborn.cluster.data_dir))
    assert out.returncode == 0, out.stderr
    # the master stayed until the forced stop, and no longer
    assert pid_gone(pid), "the killed trial outlived the master"
    assert time.time() - t0 < KILL_GRACE_SECONDS + 5 and time.time() >= due - 1
    stubborn.cluster.up()
    wait_until("CANCELED", lambda: stubborn.state(exp_id) == "CANCELED", timeout=30)


def test_a_kill_is_carried_out_by_the_next_master_after_a_crash(stubborn: Stubborn) -> None:
    exp_id, pid = stubborn.start("crash")
    due = stubborn.kill(exp_id)
    master = stubborn.cluster.data_dir / "master.pid"
    os.kill(int(master.read_text()), 9)  # the kill's follow-up dies with it, unrecorded
    time.sleep(1)
    assert not pid_gone(pid)  # SIGTERM ignored: only the forced stop can end it
    stubborn.cluster.up()
    wait_until("the forced stop", lambda: pid_gone(pid), timeout=KILL_GRACE_SECONDS + 10)
    assert time.time() >= due - 1  # at the recorded deadline, not at once
    wait_until("CANCELED", lambda: stubborn.state(exp_id) == "CANCELED", timeout=30)
    db = json.loads(stubborn.cluster.det("experiment", "describe", str(exp_id),
                                         "--json").stdout)
    assert db["trials"][0]["state"] == "CANCELED"


def test_a_slurm_master_without_slurm_says_so_and_slurm_options_need_slurm(
        tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    c.env["SLURM_CONF"] = str(tmp_path / "no-such-slurm.conf")
    out = c.det("master", "up", "--data-dir", str(c.data_dir), "--port", str(c.port),
                "--resource-manager", "slurm")
    assert out.returncode == 1
    assert "the master cannot start: SLURM_CONF names" in out.stderr, out.stderr
    out = c.det("master", "up", "--data-dir", str(c.data_dir), "--port", str(c.port),
                "--partition", "gpu")
    assert out.returncode == 2 and "--partition is only for --resource-manager slurm" in out.stderr
