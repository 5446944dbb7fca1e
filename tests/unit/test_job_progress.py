"""A job's progress as the master derives it (det_sdk.master.job_progress) and as the
CLI shows it (`det job list`'s column, `det job describe`)."""

from __future__ import annotations

import pytest

from det_sdk.cli.job_cmd import JOB_HEADERS, job_describe_lines, job_progress_text, job_rows
from det_sdk.master.job_progress import job_progress


def test_rate_and_time_left_are_measured_over_the_current_process() -> None:
    # 200 rows done before this process (a resumed job), 600 now, 10 s apart: 40 rows/s
    view = job_progress("RUNNING", 600, 1000, first_rows=200, first_at=100.0, last_at=110.0)
    assert view == {"progress": 0.6, "rows_done": 600, "rows_total": 1000,
                    "rows_per_second": 40.0, "eta_seconds": 10.0}


def test_an_unknown_total_has_a_rate_but_no_fraction_nor_time_left() -> None:
    view = job_progress("RUNNING", 500, None, 0, 0.0, 5.0)
    assert (view["progress"], view["rows_per_second"], view["eta_seconds"]) == (None, 100.0,
                                                                                 None)


@pytest.mark.parametrize(("state", "done", "total", "first", "at", "last", "expected"), [
    ("QUEUED", None, None, None, None, None, (None, None, None)),  # nothing reported yet
    ("RUNNING", 10, 100, 10, 5.0, 5.0, (0.1, None, None)),  # one report: no rate yet
    ("PAUSED", 50, 100, 0, 0.0, 10.0, (0.5, 5.0, None)),  # not running: no time left
    ("COMPLETED", 90, None, 0, 0.0, 9.0, (1.0, 10.0, None)),  # done is done, total or not
    ("RUNNING", 0, 0, 0, 0.0, 1.0, (1.0, 0.0, None)),  # an empty input
    ("RUNNING", 120, 100, 0, 0.0, 1.0, (1.0, 120.0, 0.0)),  # never past 1
])
def test_edge_cases(state: str, done: int | None, total: int | None, first: int | None,
                    at: float | None, last: float | None,
                    expected: tuple[float | None, float | None, float | None]) -> None:
    view = job_progress(state, done, total, first, at, last)
    assert (view["progress"], view["rows_per_second"], view["eta_seconds"]) == expected


def test_the_list_has_a_progress_column() -> None:
    jobs = [{"id": 2, "name": None, "state": "RUNNING", "progress": 0.4204, "exit_code": None,
             "entrypoint": "python3 bi.py"},
            {"id": 1, "name": "bi", "state": "QUEUED", "progress": None, "exit_code": None,
             "entrypoint": "python3 bi.py"}]
    assert JOB_HEADERS[3] == "PROGRESS"
    assert [r[3] for r in job_rows(jobs)] == ["42.0%", "-"]
    assert job_progress_text(1.0) == "100.0%"


def test_describe_says_rows_rate_time_left_output_and_restarts() -> None:
    lines = job_describe_lines({
        "id": 3, "name": "bi", "state": "RUNNING", "exit_code": None, "progress": 0.25,
        "rows_done": 250, "rows_total": 1000, "rows_per_second": 12.5, "eta_seconds": 3725.0,
        "output": "/data/preds", "restarts": 1, "config": {"max_restarts": 5}})
    text = "\n".join(lines)
    for part in ("job 3 (bi)", "RUNNING", "25.0%", "250 of 1000", "12.5", "1h02m",
                 "/data/preds", "1 of 5"):
        assert part in text, text
    unknown = "\n".join(job_describe_lines({"id": 4, "state": "QUEUED", "config": {}}))
    assert "progress:  -" in unknown and "time left: -" in unknown
    # the job script's metrics: each group's latest, escaped (a name cannot drive the
    # terminal), non-finite values as the wire says them
    measured = job_describe_lines({"id": 5, "state": "RUNNING", "config": {}, "latest_metrics": {
        "training": {"steps_completed": 40, "epoch": 1,
                     "metrics": {"loss": 0.123456, "bad\x1b[31m": "NaN"}}}})
    assert measured[-1] == "  training: loss=0.1235, bad\\x1b[31m=NaN (step 40)"


@pytest.mark.parametrize(("state", "event", "expected"), [
    ("RUNNING", "paused", "STOPPING_PAUSED"),
    ("STOPPING_PAUSED", "exited stopped", "PAUSED"),  # it stopped because it was asked
    ("STOPPING_PAUSED", "exited done", "COMPLETED"),  # it finished before it saw the pause
    ("PAUSED", "activated", "QUEUED"),
    ("RUNNING", "exited failed", "QUEUED"),  # launched again: restarts were left
    ("RUNNING", "exited failed for good", "ERROR"),
    ("RUNNING", "killed", "STOPPING_CANCELED"),
    ("STOPPING_CANCELED", "exited failed", "CANCELED"),  # a kill is not restarted
    ("QUEUED", "killed", "CANCELED"),
    ("RUNNING", "master restarted", "QUEUED"),  # its process is gone: it runs again
    ("COMPLETED", "killed", "COMPLETED"),
])
def test_job_transitions(state: str, event: str, expected: str) -> None:
    from det_sdk.master.lifecycle import JobEvent, next_job_state

    assert next_job_state(state, JobEvent(event)).value == expected


@pytest.mark.parametrize(("state", "event"), [("COMPLETED", "paused"), ("CANCELED", "activated"),
                                              ("QUEUED", "exited done")])
def test_job_transitions_refused(state: str, event: str) -> None:
    from det_sdk.master.errors import IllegalTransition
    from det_sdk.master.lifecycle import JobEvent, next_job_state

    with pytest.raises(IllegalTransition, match=f"a {state} job cannot be {event}"):
        next_job_state(state, JobEvent(event))
