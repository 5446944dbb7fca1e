"""det_sdk.storage (atomic checkpoint directories) and det_sdk.session (local runs).

This module's other half, the tests that start no process: tests/unit/test_storage_session.py.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from det_sdk.storage import pid_alive

# Stack-neutral: storage and local sessions load no Keras.
pytestmark = pytest.mark.stack_neutral


def test_a_zombie_process_is_not_alive() -> None:
    """An exited process nobody reaped yet must not keep a trial or a master 'running'."""
    child = subprocess.Popen(["sleep", "100"])
    assert pid_alive(child.pid)
    child.kill()
    deadline = time.time() + 10
    while pid_alive(child.pid):  # a zombie until we wait for it
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(child.pid, 0)  # still in the process table: only the state says it exited
    child.wait()
    assert not pid_alive(child.pid)
