"""Checkpoints written in the background: a kill mid-write loses nothing already saved,
and a stop waits for the write in flight.

A real training process is SIGKILLed while its checkpoint writer has a write in
flight (a temporary directory exists); the checkpoints it had recorded are intact
(checksums verified on load) and the next run resumes from the latest of them and
ends with the weights of an uninterrupted run. Sent SIGTERM (a pause) at the same
moment instead, it finishes and records that write before it exits.
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

from tests.support import REPO, SCRIPTS, run_python

BIG = SCRIPTS / "big_checkpoints.py"


def _rows(run: Path) -> list[dict]:
    path = run / "checkpoints.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The final weights of an uninterrupted run (.npz)."""
    tmp = tmp_path_factory.mktemp("full")
    full = run_python(BIG, {"DET_RUNS_DIR": str(tmp / "runs"),
                            "BIG_WEIGHTS_OUT": str(tmp / "full.npz")})
    assert full.returncode == 0, full.stderr[-3000:]
    return tmp / "full.npz"


def _signal_mid_write(runs: Path, signum: int) -> tuple[str, subprocess.CompletedProcess]:
    """Start a run; send ``signum`` while its second or a later checkpoint is being
    written. The uuid of the checkpoint in flight then, and the finished process."""
    ckpt_dir = runs / "1" / "checkpoints"
    env = {**os.environ, "DET_RUNS_DIR": str(runs), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("DET_RESUME", None)
    proc = subprocess.Popen([sys.executable, str(BIG)], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    in_flight, recorded = "", runs / "1" / "checkpoints.jsonl"
    try:
        # a stat a poll until the first checkpoint is recorded, then a listing: the poll
        # runs every 2 ms (a write is in flight for tens of milliseconds), so it must be
        # cheap (it read and parsed checkpoints.jsonl and globbed at each poll)
        while time.time() < deadline and proc.poll() is None:
            if recorded.exists() and recorded.stat().st_size:
                break
            time.sleep(0.002)
        while time.time() < deadline and proc.poll() is None:
            # a write in flight after the first was recorded: its temporary directory
            # (.tmp-<uuid>-<pid>) exists
            tmp = [n for n in os.listdir(ckpt_dir) if n.startswith(".tmp-")]
            if tmp:
                os.kill(proc.pid, signum)
                in_flight = tmp[0].removeprefix(".tmp-").rsplit("-", 1)[0]
                break
            time.sleep(0.002)
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert in_flight, "the process ended before a write could be caught in flight"
    return in_flight, subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _resume_to_the_uninterrupted_weights(runs: Path, tmp_path: Path,
                                          uninterrupted: Path) -> None:
    """Resume the run in ``runs`` to its end: the final weights equal the uninterrupted
    run's."""
    resumed = run_python(BIG, {"DET_RUNS_DIR": str(runs), "DET_RESUME": "1",
                               "BIG_WEIGHTS_OUT": str(tmp_path / "resumed.npz")})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = np.load(uninterrupted), np.load(tmp_path / "resumed.npz")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_a_stop_waits_for_the_write_in_flight(tmp_path: Path, uninterrupted: Path) -> None:
    runs = tmp_path / "paused"
    in_flight, stopped = _signal_mid_write(runs, signal.SIGTERM)
    assert stopped.returncode == 0, stopped.stderr[-3000:]  # SIGTERM: checkpoint, clean exit
    assert "stopped by SIGTERM" in stopped.stderr
    # the write under way when the signal came was finished and recorded before the
    # process exited, and so was the stop's own checkpoint after it
    rows = _rows(runs / "1")
    uuids = [r["uuid"] for r in rows]
    assert in_flight in uuids
    ckpt_dir = runs / "1" / "checkpoints"
    assert (ckpt_dir / uuids[-1] / "checksums.json").is_file()
    assert not list(ckpt_dir.glob(".tmp-*"))
    _resume_to_the_uninterrupted_weights(runs, tmp_path, uninterrupted)


def test_kill_during_a_background_write_keeps_the_previous_checkpoint(
        tmp_path: Path, uninterrupted: Path) -> None:
    runs = tmp_path / "killed"
    ckpt_dir = runs / "1" / "checkpoints"
    in_flight, _ = _signal_mid_write(runs, signal.SIGKILL)
    assert in_flight not in [r["uuid"] for r in _rows(runs / "1")]

    recorded = _rows(runs / "1")
    assert recorded, "the first checkpoint was recorded before the kill"
    # every recorded checkpoint is complete; the one cut off was never recorded
    for row in recorded:
        assert (ckpt_dir / row["uuid"] / "checksums.json").is_file()
    _resume_to_the_uninterrupted_weights(runs, tmp_path, uninterrupted)
    # the abandoned temporary directory was swept by the next run's first save
    assert not list(ckpt_dir.glob(".tmp-*"))
    epochs = [r["epoch"] for r in _rows(runs / "1")]
    assert epochs == sorted(set(epochs)) and epochs[-1] == 6
