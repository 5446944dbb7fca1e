"""Paged views of the master (issue 15): limit + cursor lists of experiments, trials, jobs
and checkpoints, bounded describe and metrics, and `det ... list` showing the newest page.

The fast tests run the master's real app in-process (FastAPI's TestClient) over a real
SQLite store filled straight through SQLite (``harness.master.fill_history``);
the slow ones drive a real master on 127.0.0.1 with the real `det` CLI.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_master_paging.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from det_sdk import api, client
from det_sdk.master.app import create_app
from det_sdk.master.core import Master
from det_sdk.master.pages import decode_cursor, encode_cursor
from harness.history import fill_history

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral

LISTS = {  # path -> (rows' key, their key field, newest first?)
    "/api/v1/experiments": ("experiments", "id", True),
    "/api/v1/jobs": ("jobs", "id", True),
    "/api/v1/checkpoints": ("checkpoints", "uuid", True),
}


class App:
    """A master's app in this process, signed in as its user (never started: no scheduler
    runs, so tests may set any state)."""

    def __init__(self, root: Path) -> None:
        self.master = Master(root / "m", slots=1, url="http://127.0.0.1:1")
        self.db = root / "m" / "master.db"
        self.http = TestClient(create_app(self.master),
                               headers={"Authorization": f"Bearer {self.master.user_token()}"})

    def get(self, path: str, **params: Any) -> Any:
        r = self.http.get(path, params=params)
        assert r.status_code == 200, r.text
        return r.json()

    def walk(self, path: str, key: str, limit: int, between: Any = None) -> Iterator[dict]:
        cursor = None
        while True:
            page = self.get(path, limit=limit, **({"cursor": cursor} if cursor else {}))
            assert len(page[key]) <= limit
            yield from page[key]
            cursor = page["next_cursor"]
            if cursor is None:
                return
            if between:
                between()


@pytest.fixture
def app(tmp_path: Path) -> App:
    return App(tmp_path)


def test_walking_every_list_sees_each_row_once_in_order_while_rows_arrive(app: App) -> None:
    fill_history(app.db, 25, trials_per_experiment=2, checkpoints_per_trial=1, jobs=13)
    before = {}
    for path, (key, field, _) in LISTS.items():
        before[path] = app.get(path, limit=api.MAX_PAGE_LIMIT)
        expected = [r[field] for r in before[path][key]]
        assert len(expected) == before[path]["total"] > 7

        def arrive() -> None:  # new experiments, trials, checkpoints and a job
            fill_history(app.db, 2, trials_per_experiment=1, jobs=1, name="late")

        walked = [r[field] for r in app.walk(path, key, 7, between=arrive)]
        assert walked == expected  # once each, newest first, none of the late ones
    ids = [r["id"] for r in before["/api/v1/experiments"]["experiments"]]
    assert ids == sorted(ids, reverse=True)
    # the late rows are on the next walk's first page
    first = app.get("/api/v1/experiments", limit=3)["experiments"]
    assert [e["name"].split("-")[0] for e in first] == ["late"] * 3


def test_an_experiments_trials_page_in_id_order_and_describe_embeds_the_first(
        app: App) -> None:
    (exp,) = fill_history(app.db, 1, trials_per_experiment=250)
    info = app.get(f"/api/v1/experiments/{exp}", trials_limit=100)
    assert len(info["trials"]) == 100 and info["num_trials"] == 250
    assert info["trial_states"] == {"COMPLETED": 250} and info["progress"] == 1.0
    rest = []
    cursor = info["trials_next_cursor"]
    while cursor:
        page = app.get(f"/api/v1/experiments/{exp}/trials", limit=60, cursor=cursor)
        assert page["total"] == 250
        rest += page["trials"]
        cursor = page["next_cursor"]
    ids = [t["id"] for t in info["trials"] + rest]
    assert ids == sorted(ids) and len(set(ids)) == 250
    assert rest[0]["searcher_length"] == {"unit": "batches", "length": 100}
    # the SDK's client puts them together
    c = client.MasterClient("http://testserver", None, transport=app.http._transport)
    c._http.headers.update(app.http.headers)
    assert [t["id"] for t in c.experiment(exp, all_trials=True)["trials"]] == ids
    assert [t["id"] for t in c.trials(exp)] == ids


def test_summaries_count_trials_by_state_progress_and_best(app: App) -> None:
    exp = app.master.store.create_experiment_with_trials(
        {"name": "mix", "searcher": {"name": "grid", "metric": "acc",
                                     "smaller_is_better": False}}, "",
        [{"hparams": {"x": i}, "seed": i, "bracket": 0, "target": None} for i in range(4)])
    t1, t2, t3, _ = (t["id"] for t in app.master.store.trials(exp))
    app.master.store.update_trial(t1, state="RUNNING", progress=0.5, best_metric=0.7)
    app.master.store.update_trial(t2, state="COMPLETED", progress=1.0, best_metric=0.9)
    app.master.store.update_trial(t3, state="COMPLETED", progress=1.0, best_metric=0.2)
    (row,) = app.get("/api/v1/experiments")["experiments"]
    assert row["trial_states"] == {"QUEUED": 1, "RUNNING": 1, "COMPLETED": 2}
    assert row["num_trials"] == 4 and row["progress"] == pytest.approx(2.5 / 4)
    assert row["best_metric"] == 0.9 and row["smaller_is_better"] is False  # larger is better
    assert (row["searcher"], row["metric"], row["name"]) == ("grid", "acc", "mix")
    assert "config" not in row and "trials" not in row  # a summary, not the experiment


@pytest.mark.parametrize(("path", "params", "field"), [
    ("/api/v1/experiments", {"limit": 0}, "limit"),
    ("/api/v1/experiments", {"limit": api.MAX_PAGE_LIMIT + 1}, "limit"),
    ("/api/v1/jobs", {"limit": "ten"}, "limit"),
    ("/api/v1/checkpoints", {"limit": -1}, "limit"),
    ("/api/v1/experiments", {"cursor": "not-a-cursor"}, "cursor"),
    ("/api/v1/jobs", {"cursor": encode_cursor("experiments", 5)}, "cursor"),
    ("/api/v1/checkpoints", {"cursor": encode_cursor("checkpoints", -3)}, "cursor"),
    ("/api/v1/experiments", {"cursor": "x" * 201}, "cursor"),
    ("/api/v1/experiments/1", {"trials_limit": 0}, "trials_limit"),
    ("/api/v1/trials/1/metrics", {"limit": api.MAX_METRICS_LIMIT + 1}, "limit"),
    ("/api/v1/trials/1/metrics", {"after_steps": -1}, "after_steps"),
])
def test_bad_limits_and_cursors_are_refused_naming_the_parameter(
        app: App, path: str, params: dict[str, Any], field: str) -> None:
    fill_history(app.db, 1)
    r = app.http.get(path, params=params)
    # this API answers every invalid field with 400 (not FastAPI's 422), the field named
    assert r.status_code == 400, r.text
    assert [d["loc"] for d in r.json()["detail"]] == [["query", field]]


def test_cursors_are_opaque_but_checked() -> None:
    c = encode_cursor("jobs", 17)
    assert decode_cursor("jobs", c) == 17 and "17" not in c
    with pytest.raises(ValueError, match="another list"):
        decode_cursor("experiments", c)


def test_a_page_costs_the_same_statements_with_ten_or_a_thousand_experiments(
        tmp_path: Path) -> None:
    """No query per experiment or trial: count the SQL statements of one page."""
    counts = {}
    for n in (10, 1000):
        app = App(tmp_path / str(n))
        fill_history(app.db, n, trials_per_experiment=3, jobs=n)
        statements: list[str] = []
        app.master.store._db.set_trace_callback(statements.append)
        for path in ("/api/v1/experiments", "/api/v1/jobs", "/api/v1/checkpoints",
                     "/api/v1/experiments/5"):
            statements.clear()
            app.get(path, limit=100) if path.count("/") == 3 else app.get(path)
            counts[n, path] = len([s for s in statements if s.lstrip().startswith("SELECT")])
        app.master.store._db.set_trace_callback(None)
    for path in ("/api/v1/experiments", "/api/v1/jobs", "/api/v1/checkpoints",
                 "/api/v1/experiments/5"):
        assert counts[10, path] == counts[1000, path] <= 8, counts


def test_metrics_pages_follow_after_steps_and_never_split_a_step(app: App) -> None:
    (exp,) = fill_history(app.db, 1, trials_per_experiment=1)
    (trial,) = app.master.store.trials(exp)
    app.master.store.update_trial(trial["id"], state="RUNNING")
    for step in range(1, 301):
        app.master.report_metrics(trial["id"], "training", step, 0, {"loss": 1 / step})
        if step % 10 == 0:
            app.master.report_metrics(trial["id"], "validation", step, 0, {"val_loss": step})
    path = f"/api/v1/trials/{trial['id']}/metrics"
    everything, after, pages = [], None, 0
    while True:
        page = app.get(path, limit=25, **({"after_steps": after} if after is not None else {}))
        pages += 1
        everything += page
        if len(page) < 25:
            break
        assert len(page) <= 26 and page[-1]["steps_completed"] != page[0]["steps_completed"]
        after = page[-1]["steps_completed"]
    keys = [(m["steps_completed"], m["group"]) for m in everything]
    # the 100-step validation row (fill_history's) is replaced by the trial's own report
    assert keys == sorted(set(keys)) and len(keys) == 300 + 30
    assert pages >= 13
    assert app.get(path, group="validation", limit=5)[-1]["steps_completed"] == 50
    assert len(app.get(path)) == 330  # the default page holds a short trial whole


def test_an_older_database_gets_the_indexes(tmp_path: Path) -> None:
    db = tmp_path / "m" / "master.db"
    fill_history(db, 3)
    with sqlite3.connect(db) as conn:
        for name in ("trials_by_experiment", "checkpoints_by_trial"):
            conn.execute(f"DROP INDEX {name}")
    App(tmp_path)  # opening it is the migration
    with sqlite3.connect(db) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        plan = " ".join(r[3] for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM trials WHERE experiment_id = 1"))
    assert {"trials_by_experiment", "checkpoints_by_trial"} <= names
    assert "USING INDEX trials_by_experiment" in plan


def test_the_web_uis_experiment_page_holds_at_most_a_page_of_trials(app: App) -> None:
    from det_sdk.master.ui.views import Views

    (exp,) = fill_history(app.db, 1, trials_per_experiment=api.MAX_PAGE_LIMIT + 5)
    info = Views(app.master).experiment(exp)
    assert len(info["trials"]) == api.MAX_PAGE_LIMIT and info["num_trials"] == 1005
    assert info["trials"][0]["validation"] == {"val_loss": 0.5}
    r = app.http.get(f"/ui/api/experiments/{exp}")
    assert r.status_code == 200 and len(r.json()["trials"]) == api.MAX_PAGE_LIMIT


def test_the_clients_page_sizes_are_the_masters() -> None:
    # det_sdk.client repeats two numbers of det_sdk.api so as not to import pydantic
    assert (client.MAX_PAGE, client.MAX_METRICS) == (api.MAX_PAGE_LIMIT, api.MAX_METRICS_LIMIT)
