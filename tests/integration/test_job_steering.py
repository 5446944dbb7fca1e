"""Jobs steered and watched (issue 40): the master's real app in-process (FastAPI's
TestClient) over a real SQLite store, never started (no scheduler runs: each test plays
the launcher's part by recording allocations and exits, as tests/e2e cannot do
deterministically). The processes themselves: tests/e2e/test_job_steering.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from det_sdk.config import parse_job_config
from det_sdk.master.app import create_app
from det_sdk.master.core import Master
from det_sdk.master.lifecycle import JobEvent
from det_sdk.session import MasterSession


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


# --- the progress history, job metrics, and what a hostile chief sends ---------------------


def test_the_progress_history_is_bounded_and_rated_per_process(jobs: Jobs) -> None:
    job_id = jobs.create()
    alloc = jobs.launch(job_id)
    records = jobs.master.job_records
    records.max_points = 8  # the bound (1000 in use), small enough to cross here
    for i in range(41):
        assert _report(jobs, alloc, i * 25, 1000).status_code == 204
    points = records.progress_points(job_id)
    assert 4 <= len(points) <= 8  # thinned, never past the bound
    assert (points[0]["rows_done"], points[-1]["rows_done"]) == (0, 1000)  # the same span
    assert [p["rows_done"] for p in points] == sorted(p["rows_done"] for p in points)
    view = jobs.http.get(f"/ui/api/jobs/{job_id}", headers=jobs.user.headers).json()
    assert len(view["throughput"]["time"]) == len(points) - 1
    assert all(r > 0 for r in view["throughput"]["rows_per_second"])
    # a second process: no rate across the gap between the two
    jobs.master.lifecycle.job_event(job_id, JobEvent.PAUSE)
    jobs.master.acknowledge_preemption(alloc["id"])
    jobs.exit(alloc, 0)
    jobs.command(job_id, "activate")
    again = jobs.launch(job_id)
    _report(jobs, again, 1000, 1000)
    assert len(jobs.master.job_throughput(job_id)["time"]) == len(points) - 1


def _metrics(jobs: Jobs, alloc: dict[str, Any], body: Any, client: _As | None = None) -> Any:
    return (client or jobs.task(alloc)).post(f"/api/v1/allocations/{alloc['id']}/metrics",
                                             json=body)


def test_job_metrics_are_kept_and_returned(jobs: Jobs) -> None:
    job_id = jobs.create()
    alloc = jobs.launch(job_id)
    assert jobs.job(job_id)["latest_metrics"] == {}
    for step, loss in ((10, 0.5), (20, 0.25), (20, 0.2)):  # a repeat replaces
        assert _metrics(jobs, alloc, {"group": "training", "steps_completed": step,
                                      "metrics": {"loss": loss}}).status_code == 204
    assert _metrics(jobs, alloc, {"group": "validation", "steps_completed": 20, "epoch": 1,
                                  "metrics": {"val_loss": "NaN"}}).status_code == 204
    latest = jobs.job(job_id)["latest_metrics"]
    assert latest == {"training": {"steps_completed": 20, "epoch": 0, "metrics": {"loss": 0.2}},
                      "validation": {"steps_completed": 20, "epoch": 1,
                                     "metrics": {"val_loss": "NaN"}}}
    ui = jobs.http.get(f"/ui/api/jobs/{job_id}/metrics", headers=jobs.user.headers).json()
    assert ui["groups"]["training"]["steps"] == [10, 20]
    assert ui["groups"]["training"]["metrics"] == {"loss": [0.5, 0.2]}
    assert ui["groups"]["validation"]["metrics"] == {"val_loss": [None]}  # a gap, not NaN
    assert _metrics(jobs, alloc, {"group": "training", "steps_completed": 25,
                                  "metrics": {"loss": 0.15}}).status_code == 204
    ui = jobs.http.get(f"/ui/api/jobs/{job_id}/metrics", headers=jobs.user.headers).json()
    assert ui["groups"]["training"]["metrics"] == {"loss": [0.5, 0.2, 0.15]}  # the new row
    # another allocation's token may not report for this one; an ended job's are refused
    other = jobs.launch(jobs.create())
    body = {"group": "training", "steps_completed": 30, "metrics": {"loss": 0.1}}
    assert _metrics(jobs, alloc, body, jobs.task(other)).status_code == 403
    jobs.exit(alloc, 0)
    refused = jobs.user.post(f"/api/v1/allocations/{alloc['id']}/metrics", json=body)
    assert refused.status_code == 409 and "COMPLETED" in refused.json()["detail"]
    assert jobs.job(job_id)["latest_metrics"]["training"]["steps_completed"] == 25


_HUGE = 2**63
_BAD_PROGRESS = [
    ({"rows_done": _HUGE}, "rows_done"),
    ({"rows_done": -1}, "rows_done"),
    ({"rows_done": 5, "rows_total": -3}, "rows_total"),
    ('{"rows_done": NaN}', "rows_done"),
    ({"rows_done": "5"}, "rows_done"),
    ({"rows_done": True}, "rows_done"),
    ({"rows_done": 1.5}, "rows_done"),
    ({"rows_done": 5, "output": "x" * 5000}, "output"),
    ({"rows_done": 5, "output": 7}, "output"),
    ({"rows_done": 5, "extra": 1}, "extra"),
    ([5], "body"),
]
# (NaN and the infinities are metrics, as a trial's: a diverging model reports them)
_BAD_METRICS = [
    ({"group": "training", "steps_completed": _HUGE, "metrics": {}}, "steps_completed"),
    ({"group": "training", "steps_completed": -1, "metrics": {}}, "steps_completed"),
    ({"group": "training", "steps_completed": 1, "metrics": {"loss": "lots"}}, "loss"),
    ({"group": "training", "steps_completed": 1, "metrics": {"x" * 300: 1.0}}, "metrics"),
    ({"group": "training", "steps_completed": 1,
      "metrics": {f"m{i}": 1.0 for i in range(1001)}}, "metrics"),
    ({"group": "nonsense", "steps_completed": 1, "metrics": {}}, "group"),
    ({"group": "training", "steps_completed": 1, "metrics": {}, "extra": 1}, "extra"),
    ({"group": "training", "steps_completed": 1, "metrics": [1]}, "metrics"),
]


def test_hostile_reports_are_refused_naming_the_field_and_nothing_is_kept(jobs: Jobs) -> None:
    job_id = jobs.create()
    alloc = jobs.launch(job_id)
    task = jobs.task(alloc)
    progress = f"/api/v1/allocations/{alloc['id']}/progress"
    metrics = f"/api/v1/allocations/{alloc['id']}/metrics"
    for path, cases in ((progress, _BAD_PROGRESS), (metrics, _BAD_METRICS)):
        for body, field in cases:
            r = jobs.http.post(path, content=body if isinstance(body, str) else json.dumps(body),
                               headers={**task.headers, "Content-Type": "application/json"})
            assert r.status_code == 400, (body, r.status_code, r.text)
            assert field in r.text, (body, r.text)
    # a 10 MB body is refused before it is read, with the limit
    big = jobs.http.post(metrics, content=b'{"group": "training", "metrics": {"a": "' +
                         b"x" * (10 << 20) + b'"}}',
                         headers={**task.headers, "Content-Type": "application/json"})
    assert big.status_code == 413 and "body" in big.json()["detail"]
    # nothing was kept, and the master still answers
    info = jobs.job(job_id)
    assert (info["rows_done"], info["latest_metrics"]) == (None, {})
    assert jobs.master.job_records.progress_points(job_id) == []
    assert _report(jobs, alloc, 7, 10).status_code == 204
    assert jobs.job(job_id)["rows_done"] == 7


class _Forward:
    """The part of det_sdk.client.MasterClient a job's MasterSession uses, over the
    in-process app (the report thread's requests are real requests to it)."""

    def __init__(self, http: TestClient, token: str) -> None:
        self.http, self.token = http, token

    def request(self, method: str, path: str, **kwargs: Any) -> None:
        r = self.http.request(method, path, headers={"Authorization": f"Bearer {self.token}"},
                              **kwargs)
        assert r.status_code < 300, r.text

    def preemption(self, alloc_id: str, timeout_seconds: float) -> bool:
        time.sleep(0.05)
        return False


def test_a_job_scripts_report_metrics_reach_the_master(jobs: Jobs) -> None:
    """What det.keras's fit, det.core's train.report_training_metrics and the
    torch_batch_process context call in a job: MasterSession.report_metrics."""
    job_id = jobs.create()
    alloc = jobs.launch(job_id)
    info = SimpleNamespace(trial_id=None, experiment_id=None, task_type="GENERIC",
                           allocation_id=alloc["id"], config={}, latest_checkpoint=None,
                           master_url="http://testserver", session_token=alloc["token"])
    session = MasterSession(info, client=_Forward(jobs.http, alloc["token"]))
    session.report_metrics("training", 5, 0, {"loss": 0.3})
    session.report_metrics("validation", 5, 1, {"val_loss": float("nan")})
    session.close(timeout=30)
    latest = jobs.job(job_id)["latest_metrics"]
    assert latest["training"]["metrics"] == {"loss": 0.3}
    assert latest["validation"] == {"steps_completed": 5, "epoch": 1,
                                    "metrics": {"val_loss": "NaN"}}


def test_the_ui_steers_a_job_with_its_action_header_only(jobs: Jobs) -> None:
    job_id = jobs.create()
    jobs.launch(job_id)
    http, path = jobs.http, f"/ui/api/jobs/{job_id}/pause"
    token = jobs.user.headers["Authorization"][7:]
    cookie = http.post("/ui/signin", data={"token": token}, follow_redirects=False)
    assert cookie.status_code == 303
    # a signed-in browser's plain form post (another site's) changes nothing
    assert http.post(path).status_code == 403
    assert jobs.job(job_id)["state"] == "RUNNING"
    r = http.post(path, headers={"X-Det-UI": "1"})
    assert r.status_code == 200 and r.json() == {"state": "STOPPING_PAUSED"}
    assert http.post(f"/ui/api/jobs/{job_id}/explode", headers={"X-Det-UI": "1"}).status_code \
        == 404
    http.cookies.clear()
    assert http.post(path, headers={"X-Det-UI": "1"}).status_code == 401
