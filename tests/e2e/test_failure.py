"""The root cause of a failed task (det_sdk.failure, det_sdk.launch.catch,
det_sdk.master.root_cause): parsing on captured text, the per-rank wrapper on real
processes, the bounded log read. The cluster end to end is in test_cluster_faults.py
and test_slurm.py.

This module's other half, the tests that start no process: tests/unit/test_failure.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from det_sdk.failure import (
    Failure,
    read_records,
)

# Stack-neutral: root causes are parsed from processes' output, whatever they ran.
pytestmark = pytest.mark.stack_neutral


def _catch(tmp_path: Path, code: str) -> tuple[subprocess.CompletedProcess[str], list[Failure]]:
    (tmp_path / "script.py").write_text(code)
    proc = subprocess.run(
        [sys.executable, "-m", "det_sdk.launch.catch", "--record-dir", str(tmp_path / "rec"),
         "--", "sh", "-c", f"{sys.executable} script.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOROVOD_RANK": "3"})
    return proc, read_records(tmp_path / "rec")


def test_catch_records_the_exception_and_passes_output_and_status(tmp_path: Path) -> None:
    proc, records = _catch(tmp_path, 'print("out")\ndef f():\n    raise KeyError("k")\nf()\n')
    assert proc.returncode == 1
    assert proc.stdout == "out\n" and "KeyError: 'k'" in proc.stderr  # passed through
    (f,) = records
    assert (f.type, f.message, f.file, f.line, f.function, f.rank, f.exit_code) == (
        "KeyError", "'k'", "script.py", 3, "f", 3, 1)


def test_catch_records_a_signal_and_exits_as_a_shell_would(tmp_path: Path) -> None:
    proc, records = _catch(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert proc.returncode == 128 + 11
    (f,) = records
    # sh -c reports its child's signal as 128 + N; exec'ed directly it would be -11
    assert f.headline() in ("killed by signal SIGSEGV", "exited with code 139 (signal SIGSEGV?)")


def test_catch_writes_nothing_on_success(tmp_path: Path) -> None:
    proc, records = _catch(tmp_path, "import sys\nprint('fine', file=sys.stderr)\n")
    assert proc.returncode == 0 and proc.stderr == "fine\n" and records == []
    assert not (tmp_path / "rec").exists()


_COUNTS_SIGTERM = """\
import signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append(1))
print("ready", flush=True)
deadline = time.time() + 20
while time.time() < deadline and not got:
    time.sleep(0.05)
time.sleep(0.5)  # a second delivery would land here
print("sigterms", len(got), flush=True)
"""


@pytest.mark.parametrize("forward", [True, False])
def test_catch_sigterm_reaches_the_command_exactly_once(tmp_path: Path, forward: bool) -> None:
    """horovodrun signals only the process it started (--forward-signals); the local
    manager and Slurm signal the group: either way the script gets SIGTERM once."""
    import os
    import signal

    (tmp_path / "script.py").write_text(_COUNTS_SIGTERM)
    proc = subprocess.Popen(
        [sys.executable, "-m", "det_sdk.launch.catch", *(["--forward-signals"] * forward),
         "--record-dir", str(tmp_path / "rec"), "--", sys.executable, "script.py"],
        cwd=tmp_path, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    if forward:
        proc.send_signal(signal.SIGTERM)  # the wrapper alone
    else:
        os.killpg(proc.pid, signal.SIGTERM)  # the whole group
    out, _ = proc.communicate(timeout=30)
    assert out == "sigterms 1\n" and proc.returncode == 0


def test_catch_a_process_stopped_while_ending_of_its_exception_records_the_exception(
        tmp_path: Path) -> None:
    """horovodrun stops the other ranks (SIGTERM) when one exits: a rank stopped while
    tearing down after its own uncaught exception failed of that exception, timed when
    its traceback was printed, not when it was stopped."""
    import os
    import signal
    import time

    (tmp_path / "script.py").write_text(
        "import atexit, time\n"
        "atexit.register(time.sleep, 30)  # a slow teardown, as TensorFlow's and Horovod's\n"
        "raise ValueError('bad lr 7')\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "det_sdk.launch.catch", "--record-dir", str(tmp_path / "rec"),
         "--", sys.executable, "script.py"],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    while not lines or not lines[-1].startswith("ValueError"):
        lines.append(proc.stderr.readline())
        assert lines[-1], lines  # the traceback ends with the exception's line
    printed = time.time()
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    (f,) = read_records(tmp_path / "rec")
    assert (f.headline(), f.line, f.exit_code) == ("ValueError: bad lr 7", 3, -signal.SIGTERM)
    assert f.time is not None and f.time < printed


def test_catch_a_crash_after_a_traceback_is_the_crash(tmp_path: Path) -> None:
    proc, records = _catch(tmp_path, (
        "import os, signal, traceback\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n"))
    (f,) = records
    assert proc.returncode == 128 + 11
    assert f.type == "" and "SIGSEGV" in f.headline()


def test_catch_a_handled_traceback_long_before_the_exit_is_not_the_cause(tmp_path: Path) -> None:
    proc, records = _catch(tmp_path, (
        "import sys, traceback\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()\n"
        "for i in range(100):\n    print('epoch', i, file=sys.stderr)\n"
        "sys.exit('error: no such file: data.csv')\n"))
    assert proc.returncode == 1
    (f,) = records
    assert f.headline() == "exited with code 1: error: no such file: data.csv"


def test_a_forwarded_sigterm_reaches_the_worker_behind_the_shell_and_the_wrapper_waits_for_it(
        tmp_path: Path) -> None:
    """Under horovodrun the wrapper passes SIGTERM on: COMMAND is ``sh -c ENTRYPOINT``,
    whose shell dies of it at once; the worker behind it gets it too, stops in its own
    time, and the wrapper (so the rank, so the task) ends only after it. Before, the
    worker ran on, orphaned, and the master relaunched the trial beside it."""
    import signal

    from det_sdk.storage import pid_alive

    worker = tmp_path / "worker.py"
    worker.write_text(
        "import os, signal, sys, time\n"
        "def stop(*_):\n"
        "    time.sleep(1.0)  # a graceful stop takes a while (a checkpoint)\n"
        f"    open({str(tmp_path / 'stopped')!r}, 'w').write('yes')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n"
        "while True:\n"
        "    time.sleep(0.05)\n")
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "det_sdk.launch.catch", "--forward-signals", "--record-dir",
         str(tmp_path / "records"), "--", "sh", "-c", f"{sys.executable} {worker}; true"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = 0
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        pid = int((tmp_path / "pid").read_text())
        wrapper.send_signal(signal.SIGTERM)
        wrapper.wait(timeout=30)
        # the wrapper ended after the worker's own stop, and nothing of it is left
        assert (tmp_path / "stopped").read_text() == "yes"
        assert not pid_alive(pid)
    finally:  # a failure leaves no worker looping on (it would outlive the test run)
        wrapper.kill()
        if pid and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
