"""A job's progress history and metrics (det_sdk.master.job_records, issue 40) on a real
SQLite store: the history never passes its bound however long the job reports, and keeps
its span; rates are per process; metrics are kept one per (group, step) while the job
reports, and survive a restarted master. The HTTP side: tests/integration/
test_job_steering.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from det_sdk.master.job_records import JobRecords, throughput
from det_sdk.master.store import Store

REPORTING = ("RUNNING", "STOPPING_PAUSED", "STOPPING_CANCELED")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "master.db")


def _running_job(store: Store) -> int:
    job = store.create_job({"name": "j"}, "a.tgz")
    store.update_job(job, state="RUNNING")
    return job


def test_a_long_job_keeps_at_most_the_bound_and_its_whole_span(store: Store) -> None:
    job = _running_job(store)
    records = JobRecords(store, max_points=50)
    sizes = []
    for i in range(1000):
        assert records.record_progress(job, "a", i, 999, None, REPORTING, now=float(i))
        sizes.append(len(records.progress_points(job)) if i % 97 == 0 else 0)
    points = records.progress_points(job)
    assert max(sizes) <= 50 and 25 <= len(points) <= 50
    assert (points[0]["time"], points[-1]["time"]) == (0.0, 999.0)
    # every kept stretch is the true mean rate (1 row a second), however thinned
    assert throughput(points)["rows_per_second"] == [1.0] * (len(points) - 1)
    # the job's row holds the latest report
    row = store.job(job)
    assert (row["rows_done"], row["rows_total"], row["progress_at"]) == (999, 999, 999.0)


def test_no_rate_across_processes_or_at_one_instant() -> None:
    points = [{"time": 0.0, "rows_done": 0, "alloc": "a"},
              {"time": 0.0, "rows_done": 5, "alloc": "a"},  # same instant: no rate
              {"time": 2.0, "rows_done": 9, "alloc": "a"},
              {"time": 50.0, "rows_done": 9, "alloc": "b"},  # paused in between
              {"time": 51.0, "rows_done": 8, "alloc": "b"}]  # never a negative rate
    assert throughput(points) == {"time": [2.0, 51.0], "rows_per_second": [2.0, 0.0]}
    assert throughput([]) == {"time": [], "rows_per_second": []}


def test_nothing_is_kept_for_a_job_that_does_not_report(store: Store) -> None:
    records = JobRecords(store)
    queued = store.create_job({"name": "q"}, "a.tgz")
    assert not records.record_progress(queued, "a", 1, 2, None, REPORTING)
    assert not records.record_metrics(queued, "training", 1, 0, {"loss": 1.0}, REPORTING)
    assert not records.record_progress(12345, "a", 1, 2, None, REPORTING)
    assert records.progress_points(queued) == [] and records.latest_metrics(queued) == {}


def test_metrics_one_per_group_and_step_and_kept_across_a_restart(
        store: Store, tmp_path: Path) -> None:
    job = _running_job(store)
    records = JobRecords(store)
    for step, loss in ((1, 0.9), (3, 0.5), (2, 0.7), (3, 0.4)):
        assert records.record_metrics(job, "training", step, 0, {"loss": loss}, REPORTING)
    assert records.record_metrics(job, "validation", 3, 1, {"val_loss": float("inf")},
                                  REPORTING)
    again = JobRecords(Store(tmp_path / "master.db"))  # a restarted master
    assert again.latest_metrics(job) == {
        "training": {"steps_completed": 3, "epoch": 0, "metrics": {"loss": 0.4}},
        "validation": {"steps_completed": 3, "epoch": 1, "metrics": {"val_loss": float("inf")}}}
    assert again.metric_group_ends(job) == {"training": 3, "validation": 3}
    steps, _, _, metrics = again.metric_columns(job, "training")
    assert steps == "1,2,3" and metrics == '[{"loss": 0.9},{"loss": 0.7},{"loss": 0.4}]'
    assert again.metric_columns(job, "evaluation") is None
