"""A trial the scheduler is launching through a resource manager with a queue (Slurm) is
shown QUEUED ("Submitting"), never RUNNING: its state turns RUNNING before the allocation
that carries Slurm's queue reason exists, and a describe in between once showed RUNNING a
trial whose Slurm job was PENDING (tests/e2e/test_slurm.py's ASHA search, at load).

In-process: a real master's store and scheduler (no scheduler thread: the test calls
``schedule()``), its local resource manager given Slurm's ``launching_reason`` and a
``launch`` that describes the experiment over the real app, then is refused (as a failed
``sbatch``: an integration test starts no process).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from harness.app_master import AppMaster

pytestmark = pytest.mark.stack_neutral


@pytest.mark.parametrize("reason", ["Submitting", None])
def test_a_trial_being_launched_is_queued_where_the_manager_queues(
        tmp_path: Path, reason: str | None) -> None:
    with AppMaster(tmp_path) as m:
        exp = m.experiment()
        launcher = m.master.launcher
        launcher.launching_reason = reason  # Slurm's, or the local manager's None
        seen: list[dict[str, Any]] = []

        def launch(**kwargs: Any) -> str:
            # describe from another thread, as a request does, while the launch runs
            t = threading.Thread(target=lambda: seen.append(
                m.http.get(f"/api/v1/experiments/{exp}").json()))
            t.start()
            t.join(30)
            raise RuntimeError("sbatch: error: refused (this test's launch)")

        launcher.launch = launch  # type: ignore[method-assign]
        m.master.scheduler.schedule()
        assert len(seen) == 1, "describe did not answer during the launch"
        (trial,) = seen[0]["trials"]
        if reason is None:  # a local process starts at once: RUNNING, as before
            assert (trial["state"], trial.get("queue_reason")) == ("RUNNING", None), trial
        else:
            assert (trial["state"], trial["queue_reason"]) == ("QUEUED", reason), trial
        assert launcher.launching_trial is None  # its allocation says the rest
        after = m.http.get(f"/api/v1/experiments/{exp}").json()["trials"][0]
        assert "refused (this test's launch)" in after["last_error"], after
        assert after.get("queue_reason") is None, after
