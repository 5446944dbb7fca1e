"""Jobs steered and watched (issue 40): the master's real app in-process (FastAPI's
TestClient) over a real SQLite store, never started (no scheduler runs: each test plays
the launcher's part by recording allocations and exits, as tests/e2e cannot do
deterministically). The processes themselves: tests/e2e/test_job_steering.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from det_sdk.config import parse_job_config
from det_sdk.master.app import create_app
from det_sdk.master.core import Master
from det_sdk.master.lifecycle import JobEvent


class _As:
    """Requests with one token."""

    def __init__(self, http: TestClient, token: str) -> None:
        self.http, self.headers = http, {"Authorization": f"Bearer {token}"}

    def get(self, path: str) -> Any:
        return self.http.get(path, headers=self.headers)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.http.post(path, headers=self.headers, **kwargs)


class Jobs:
    def __init__(self, root: Path) -> None:
        self.master = Master(root / "m", slots=1, url="http://127.0.0.1:1")
        self.app = create_app(self.master)
        # one client, one event loop (the preemption long-poll's wake-ups live on it)
        self.http = TestClient(self.app)
        self.user = _As(self.http, self.master.user_token())
        self.root = root
        self.n = 0

    def create(self, **config: Any) -> int:
        cfg = parse_job_config({"entrypoint_script": "true", **config}).model_dump(mode="json")
        archive = self.root / f"upload-{len(self.master.store.jobs())}.tar.gz"
        archive.write_bytes(b"")
        return self.master.store.create_job(cfg, str(archive))

    def launch(self, job_id: int) -> dict[str, Any]:
        """What the scheduler and the launcher record when the job starts."""
        self.n += 1
        self.master.lifecycle.job_event(job_id, JobEvent.SCHEDULED)
        alloc = {"id": f"generic-{job_id}-{self.n}", "task_type": "GENERIC", "trial_id": None,
                 "job_id": job_id, "token": f"token-{self.n}", "state": "RUNNING", "pid": None,
                 "slots": 1, "workdir": None, "started": time.time()}
        self.master.store.create_allocation(alloc)
        return alloc

    def exit(self, alloc: dict[str, Any], code: int) -> None:
        self.master.store.update_allocation(alloc["id"], state="EXITED", exit_code=code)
        self.master.scheduler.on_exit(self.master.store.allocation(alloc["id"]), code)

    def task(self, alloc: dict[str, Any]) -> _As:
        return _As(self.http, alloc["token"])

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.user.get(f"/api/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def command(self, job_id: int, command: str) -> Any:
        return self.user.post(f"/api/v1/jobs/{job_id}/{command}")


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Jobs]:
    j = Jobs(tmp_path)
    with j.http:
        yield j


def _report(jobs: Jobs, alloc: dict[str, Any], done: int, total: int | None,
            client: _As | None = None) -> Any:
    return (client or jobs.task(alloc)).post(
        f"/api/v1/allocations/{alloc['id']}/progress",
        json={"rows_done": done, "rows_total": total, "output": "/data/preds"})


def test_progress_is_kept_and_rated_per_process(jobs: Jobs) -> None:
    job_id = jobs.create()
    assert jobs.job(job_id)["progress"] is None  # nothing reported yet
    alloc = jobs.launch(job_id)
    assert _report(jobs, alloc, 100, 1000).status_code == 204
    first = jobs.job(job_id)
    assert (first["progress"], first["rows_done"], first["output"]) == (0.1, 100, "/data/preds")
    assert first["rows_per_second"] is None  # one report: no rate yet
    time.sleep(0.05)
    assert _report(jobs, alloc, 300, 1000).status_code == 204
    second = jobs.job(job_id)
    assert second["progress"] == 0.3 and second["rows_per_second"] > 0
    assert second["eta_seconds"] == pytest.approx(700 / second["rows_per_second"])
    listed = jobs.user.get("/api/v1/jobs").json()["jobs"]
    assert listed[0]["progress"] == 0.3
    # another job's task may not report for this allocation
    other = jobs.launch(jobs.create())
    assert _report(jobs, alloc, 400, 1000, jobs.task(other)).status_code == 403
    # an unknown total: no fraction
    assert _report(jobs, alloc, 400, None).status_code == 204
    assert jobs.job(job_id)["progress"] is None


def test_pause_is_the_preemption_signal_and_activate_queues_it_again(jobs: Jobs) -> None:
    job_id = jobs.create()
    alloc = jobs.launch(job_id)
    task = jobs.task(alloc)
    signal = f"/api/v1/allocations/{alloc['id']}/signals/preemption"
    assert task.get(signal).json() == {"preempt": False}
    _report(jobs, alloc, 40, 100)
    assert jobs.command(job_id, "pause").json() == {"state": "STOPPING_PAUSED"}
    assert task.get(signal).json() == {"preempt": True}
    assert task.post(f"/api/v1/allocations/{alloc['id']}/signals/ack_preemption").status_code \
        == 200
    jobs.exit(alloc, 0)  # it stopped because it was asked to: a pause, not the end
    paused = jobs.job(job_id)
    assert (paused["state"], paused["progress"]) == ("PAUSED", 0.4)
    assert jobs.command(job_id, "activate").json() == {"state": "QUEUED"}
    again = jobs.launch(job_id)
    _report(jobs, again, 50, 100)  # the rate's window starts again with this process
    assert jobs.job(job_id)["rows_per_second"] is None
    jobs.exit(again, 0)
    done = jobs.job(job_id)
    assert (done["state"], done["progress"], done["restarts"]) == ("COMPLETED", 1.0, 0)
    assert jobs.command(job_id, "pause").status_code == 409  # an ended job


def test_an_activate_while_it_stops_runs_it_again_once_stopped(jobs: Jobs) -> None:
    job_id = jobs.create()
    alloc = jobs.launch(job_id)
    jobs.command(job_id, "pause")
    assert jobs.command(job_id, "activate").json() == {"state": "STOPPING_PAUSED"}
    jobs.master.acknowledge_preemption(alloc["id"])
    jobs.exit(alloc, 0)
    assert jobs.job(job_id)["state"] == "QUEUED"


def test_a_failed_process_is_launched_again_while_restarts_are_left(jobs: Jobs) -> None:
    job_id = jobs.create(max_restarts=1)
    jobs.exit(jobs.launch(job_id), 1)
    assert (jobs.job(job_id)["state"], jobs.job(job_id)["restarts"]) == ("QUEUED", 1)
    jobs.exit(jobs.launch(job_id), 1)
    assert (jobs.job(job_id)["state"], jobs.job(job_id)["restarts"]) == ("ERROR", 1)
    log = jobs.user.get(f"/api/v1/jobs/{job_id}/logs").json()["text"]
    assert "launched again (1 of 1 restarts)" in log


def test_kill_cancels_a_queued_or_paused_job_at_once(jobs: Jobs) -> None:
    queued = jobs.create()
    assert jobs.command(queued, "kill").json() == {"state": "CANCELED"}
    assert jobs.command(queued, "kill").json() == {"state": "CANCELED"}  # changes nothing
    assert jobs.command(queued, "activate").status_code == 409
    assert jobs.command(10_000, "kill").status_code == 404


def test_an_output_in_the_working_directory_is_found_with_the_kept_files(jobs: Jobs) -> None:
    job_id = jobs.create()
    alloc = jobs.launch(job_id)
    workdir = jobs.master.tasks_dir / "jobs" / str(job_id) / "workdir"
    jobs.task(alloc).post(f"/api/v1/allocations/{alloc['id']}/progress", json={
        "rows_done": 5, "rows_total": 5, "output": str(workdir / "preds")})
    assert jobs.job(job_id)["output"] == str(workdir / "preds")  # while it runs
    jobs.exit(alloc, 0)  # the working directory goes; what the job wrote there is kept
    assert jobs.job(job_id)["output"] == str(jobs.master.files_path("jobs", job_id) / "preds")
