"""A streamed ``context.predict(..., output=)`` killed with SIGKILL and run again: every
input row's prediction is in the output exactly once, in order, bit-equal to an
uninterrupted run's, alone and under ``horovodrun -np 2``.

tests/scripts/predict_stream.py does the predicting; each test kills it at three points
(after about a tenth, a half and four fifths of the parts exist, polling the directory),
each time running the same command again, then lets the last run finish.

Each process that imports TensorFlow costs ~6 s of CPU before it predicts: the runs that
need no process of their own share one (tests/e2e/_serial_runs.py). The one-process
references (every data kind, uninterrupted) run first in the process that then finishes
the one-process test's output; the two-process test's last run finishes its output, then
the failing run of every data kind (last: it fails the launch on purpose) follows in the
same launch. What the tests kill, and the rerun after the failure, stay launches of
their own.
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

import det_sdk
from det_sdk.env import outside
from tests.support import HOROVOD_LAUNCH, REPO, SCRIPTS, wait_for_lock_holder

HOROVODRUN = Path(sys.executable).with_name("horovodrun")
SCRIPT = SCRIPTS / "predict_stream.py"
SERIAL = Path(__file__).with_name("_serial_runs.py")
ROWS, BATCH = 600, 10  # 60 parts
PARTS = ROWS // BATCH
# the first test of each fixture below holds all its runs (4 or 6 launches)
pytestmark = pytest.mark.timeout(600)


def _env(out: Path, kind: str, runs: Path, sleep: float = 0.0, hold_at: int = 0
         ) -> dict[str, str]:
    return {"PRED_OUT": str(out), "PRED_KIND": kind, "PRED_ROWS": str(ROWS),
            "PRED_BATCH": str(BATCH), "PRED_SLEEP": str(sleep), "PRED_HOLD_AT": str(hold_at),
            "DET_RUNS_DIR": str(runs)}


def _command(np_: int, script: Path = SCRIPT) -> list[str]:
    if np_ == 1:
        return [sys.executable, str(script)]
    return [*HOROVOD_LAUNCH, "-np", str(np_), "--gloo", sys.executable, str(script)]


def _serial(tmp: Path, runs: list[tuple[str, dict[str, str]]], np_: int
            ) -> subprocess.CompletedProcess[str]:
    """The script's ``runs`` (name, environment) one after another in one launch of
    tests/e2e/_serial_runs.py on ``np_`` processes; each writes what it prints to
    ``tmp/<name><rank>.out`` and, once it ended well, ``tmp/<name><rank>.out.done``."""
    spec = [{"script": str(SCRIPT), "env": env, "stdout": str(tmp / f"{name}{{rank}}.out")}
            for name, env in runs]
    (tmp / "spec.json").write_text(json.dumps(spec))
    return subprocess.run(
        _command(np_, SERIAL), cwd=REPO, capture_output=True, text=True, timeout=300,
        env=outside(keep=["DET_RUNS_DIR"], TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
                    SERIAL_SPEC=str(tmp / "spec.json")))


def _kill_after(out: Path, parts: int, env: dict[str, str], np_: int) -> int:
    """Start the script, SIGKILL its whole process group once ``parts`` parts exist;
    returns how many there were at the kill."""
    proc = subprocess.Popen(
        _command(np_), cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
        env=outside(keep=["DET_RUNS_DIR"], TF_CPP_MIN_LOG_LEVEL="2", **env))
    deadline = time.monotonic() + 240
    try:
        while len(list(out.glob("part-*.json"))) < parts:
            assert proc.poll() is None, f"ended before the kill: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc.stderr.close()
    # horovodrun's ranks outlive its group's SIGKILL by a moment: the rerun waits for the
    # one holding the output's lock, as a user told "being written by another run" would
    wait_for_lock_holder(out / ".predict.lock")
    return len(list(out.glob("part-*.json")))


KINDS = ("arrays", "wrapped", "derived", "sequence", "dataset", "multi")


def _kill_three_times(out: Path, kind: str, runs: Path, np_: int) -> list[int]:
    # each run holds once k parts exist (a test descheduled for a second under load
    # would otherwise see the run end before its kill: killed at 60 of 60)
    return [_kill_after(out, k, _env(out, kind, runs, sleep=0.01, hold_at=k), np_)
            for k in (PARTS // 10, PARTS // 2, PARTS * 4 // 5)]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], str]:
    """The one-process test's runs: ``out`` (arrays) killed three times, then one launch
    that first predicts every data kind uninterrupted into ``reference/<kind>`` (first,
    as a fresh process runs it) and then finishes ``out``, as the same command again
    would. Its folder, the parts there were at each kill and what the last run printed."""
    tmp = tmp_path_factory.mktemp("one-process")
    out, runs = tmp / "out", tmp / "runs"
    killed_at = _kill_three_times(out, "arrays", runs, 1)
    proc = _serial(tmp, [("reference", _env(tmp / "reference", ",".join(KINDS),
                                            tmp / "reference-runs")),
                         ("last", _env(out, "arrays", runs))], 1)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    return tmp, killed_at, (tmp / "last0.out").read_text()


@pytest.fixture(scope="module")
def references(one_process: tuple[Path, list[int], str]) -> dict:
    """Every data kind's predictions by one uninterrupted process."""
    tmp = one_process[0]
    return {kind: det_sdk.load_predictions(tmp / "reference" / kind) for kind in KINDS}


@pytest.fixture(scope="module")
def reference(references: dict) -> np.ndarray:
    return references["arrays"]


def _check_exactly_once(out: Path, reference: np.ndarray, killed_at: list[int]) -> None:
    assert killed_at == sorted(killed_at) and killed_at[-1] < PARTS  # three points, mid-run
    got = det_sdk.load_predictions(out)
    assert got.shape == reference.shape and got.tobytes() == reference.tobytes()
    assert np.array_equal(np.round(got[:, 0]), np.arange(ROWS))  # each row once, in order
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if n.startswith(".")]  # no temporary file left
    assert len([n for n in names if n.endswith(".npy")]) == PARTS


def test_one_process_killed_three_times_resumes_exactly_once(
        one_process: tuple[Path, list[int], str], reference: np.ndarray) -> None:
    tmp, killed_at, stdout = one_process
    _check_exactly_once(tmp / "out", reference, killed_at)
    rows, parts, resumed = map(int, stdout.split("RESULT")[1].split())
    assert (rows, parts) == (ROWS, PARTS) and resumed >= killed_at[-1] - 2


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> tuple[
        Path, list[int], subprocess.CompletedProcess[str], int,
        subprocess.CompletedProcess[str]]:
    """The two-process runs. ``killed/out`` (a dataset) killed three times; then one
    launch that finishes it, as the same command again would, and then predicts every
    data kind (each into ``out/<kind>``), the sequence first, where process 1's input
    raises at its 4th fetch, between two meetings (every 10 steps): it fails the launch
    (so it comes last); then that command again, a launch of its own. The folder, the
    parts at each kill, the failing launch, the parts the failed run had written, and
    the rerun: read by the three tests below."""
    if not HOROVODRUN.exists():
        pytest.skip("horovodrun not installed")
    tmp = tmp_path_factory.mktemp("two-processes")
    killed_out, killed_runs = tmp / "killed" / "out", tmp / "killed" / "runs"
    killed_at = _kill_three_times(killed_out, "dataset", killed_runs, 2)
    out, runs = tmp / "out", tmp / "runs"
    kinds = ("sequence", *(k for k in KINDS if k != "sequence"))
    failed = _serial(tmp, [("last", _env(killed_out, "dataset", killed_runs)),
                           ("failed", {**_env(out, ",".join(kinds), runs),
                                       "PRED_FAIL_AT": "1:4"})], 2)
    written = len(list((out / "sequence").glob("part-*.json")))
    env = outside(keep=["DET_RUNS_DIR"], TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
                  **_env(out, ",".join(kinds), runs))
    rerun = subprocess.run(_command(2), cwd=REPO, capture_output=True, text=True, timeout=300,
                           env=env)
    return tmp, killed_at, failed, written, rerun


def test_two_processes_killed_three_times_resume_a_dataset_in_order(
        two_processes: tuple, reference: np.ndarray) -> None:
    # a tf.data.Dataset wrapped with wrap_data: rank r holds elements r, r+2, ...; the
    # parts carry the global positions, so the rows come back in the input's order
    tmp, killed_at, failed, _, _ = two_processes
    for rank in (0, 1):  # the last run ended well on both processes
        assert (tmp / f"last{rank}.out.done").exists(), failed.stdout[-3000:] + failed.stderr[
            -4000:]
    _check_exactly_once(tmp / "killed" / "out", reference, killed_at)


def test_two_processes_write_every_data_kind_in_the_input_order(
        two_processes: tuple, references: dict) -> None:
    tmp, _, _, _, rerun = two_processes
    out = tmp / "out"
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    for kind in KINDS:
        got, expected = det_sdk.load_predictions(out / kind), references[kind]
        if kind == "multi":
            assert sorted(got) == ["ids", "score"]
            assert all(got[k].tobytes() == expected[k].tobytes() for k in expected), kind
            assert np.array_equal(np.round(got["ids"][:, 0]), np.arange(ROWS))
        else:
            assert got.tobytes() == expected.tobytes(), kind  # bit-equal, order included
            assert np.array_equal(np.round(got[:, 0]), np.arange(ROWS)), kind


def test_a_process_that_fails_mid_run_ends_both_with_its_error_and_the_rerun_finishes(
        two_processes: tuple, references: dict) -> None:
    # process 1's input raises at its 4th fetch, between two meetings (every 10 steps):
    # it walks on to the next meeting, where both end; none waits in a lone collective
    tmp, _, failed, written, rerun = two_processes
    out = tmp / "out"
    assert not (tmp / "failed0.out.done").exists()  # the failing run, not the one before it
    # what the processes printed: the launch's, and its runs' files (_serial)
    said = failed.stdout + failed.stderr + "".join(
        f.read_text() for f in sorted(tmp.glob("failed*.out")))
    assert failed.returncode != 0, said[-3000:]
    assert "the input broke at batch" in said and "process 1 failed" in said, said[-3000:]
    assert 0 < written < PARTS  # what was written stays valid
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert det_sdk.load_predictions(out / "sequence").tobytes() == references[
        "sequence"].tobytes()
