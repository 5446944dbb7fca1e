"""A rank whose launcher is gone ends (issue 56, item 3): torchrun's workers are not in its
process group, so a SIGKILL of the group left them meeting each other for ever; det_sdk's
launcher watch (det_sdk.engine.orphan) stops them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from det_sdk.env import outside
from tests.support import REPO, SCRIPTS, process_ended

TORCHRUN = Path(sys.executable).with_name("torchrun")
pytestmark = pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed")


def test_torchrun_killed_with_its_group_leaves_no_rank_running(tmp_path: Path) -> None:
    log = tmp_path / "ranks.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [str(TORCHRUN), "--nproc_per_node", "2", str(SCRIPTS / "torch_orphan.py")],
            cwd=REPO, start_new_session=True, stdout=err, stderr=subprocess.STDOUT,
            env=outside(ORPHAN_DIR=str(tmp_path), DET_RUNS_DIR=str(tmp_path / "runs")))
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while len(pids := [int(p.read_text()) for p in tmp_path.glob("pid.*")
                           if p.read_text()]) < 2:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    killed = time.monotonic()
    # the ranks live on after the group's SIGKILL (not in it), until the watch, which
    # looks once a second, stops them
    while not all(process_ended(p) for p in pids):
        if time.monotonic() - killed > 60:
            for p in pids:
                os.kill(p, signal.SIGKILL)
            pytest.fail(f"ranks {pids} still running 60 s after torchrun's SIGKILL:\n"
                        + log.read_text()[-3000:])
        time.sleep(0.1)
    assert time.monotonic() - killed < 30
    assert "this rank's launcher (process" in log.read_text()
