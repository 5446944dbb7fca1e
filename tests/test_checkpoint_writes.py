"""Checkpoints written in the background: a kill mid-write loses nothing already saved.

A real training process is SIGKILLed while its checkpoint writer has a write in
flight (a temporary directory exists); the checkpoints it had recorded are intact
(checksums verified on load) and the next run resumes from the latest of them and
ends with the weights of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, SCRIPTS, run_python

pytestmark = pytest.mark.slow
BIG = SCRIPTS / "big_checkpoints.py"


def _rows(run: Path) -> list[dict]:
    path = run / "checkpoints.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_kill_during_a_background_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    full = run_python(BIG, {"DET_RUNS_DIR": str(tmp_path / "full"),
                            "BIG_WEIGHTS_OUT": str(tmp_path / "full.npz")})
    assert full.returncode == 0, full.stderr[-3000:]

    runs = tmp_path / "killed"
    ckpt_dir = runs / "1" / "checkpoints"
    env = {**os.environ, "DET_RUNS_DIR": str(runs), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("DET_RESUME", None)
    proc = subprocess.Popen([sys.executable, str(BIG)], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    killed_mid_write = False
    try:
        while time.time() < deadline and proc.poll() is None:
            # the second checkpoint's write in flight: its temporary directory exists
            if len(_rows(runs / "1")) >= 1 and list(ckpt_dir.glob(".tmp-*")):
                os.kill(proc.pid, signal.SIGKILL)
                killed_mid_write = True
                break
            time.sleep(0.002)
    finally:
        proc.kill()
        proc.communicate()
    assert killed_mid_write, "the process ended before a write could be caught in flight"

    recorded = _rows(runs / "1")
    assert recorded, "the first checkpoint was recorded before the kill"
    # every recorded checkpoint is complete; the one cut off was never recorded
    for row in recorded:
        assert (ckpt_dir / row["uuid"] / "checksums.json").is_file()
    resumed = run_python(BIG, {"DET_RUNS_DIR": str(runs), "DET_RESUME": "1",
                               "BIG_WEIGHTS_OUT": str(tmp_path / "resumed.npz")})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = np.load(tmp_path / "full.npz"), np.load(tmp_path / "resumed.npz")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    # the abandoned temporary directory was swept by the next run's first save
    assert not list(ckpt_dir.glob(".tmp-*"))
    epochs = [r["epoch"] for r in _rows(runs / "1")]
    assert epochs == sorted(set(epochs)) and epochs[-1] == 6
