"""The web UI's data layer, without a browser: downsampling, series kept current, summaries.

A real ``Master`` on a real SQLite file in this process (no trials launched); the
page tests in test_ui.py drive the same code through Chromium.
"""

from __future__ import annotations

import base64
import doctest
import importlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from det_sdk.master.app import create_app
from det_sdk.master.archive import pack
from det_sdk.master.core import Master
from det_sdk.master.ui.series import Series, SeriesCache, minmax_indices
from det_sdk.master.ui.views import Views, read_log

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral


@pytest.mark.parametrize("name", ["det_sdk.master.ui.series", "det_sdk.master.ui.views",
                                  "det_sdk.cli.ui_cmd"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


def test_minmax_keeps_every_extreme_within_the_budget() -> None:
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.integers(1, 3, 100_000)).astype(float)
    loss = rng.normal(size=x.size)
    acc = rng.normal(size=x.size)
    loss[1234], acc[77_777] = 50.0, -50.0  # single-batch spikes
    acc[:10] = np.nan  # a metric missing from the first rows
    keep = minmax_indices(x, [loss, acc], 2000)
    assert len(keep) <= 2000
    assert np.all(np.diff(keep) > 0)  # sorted, no repeats: a drawable series
    assert {0, 1234, 77_777, x.size - 1} <= set(keep.tolist())
    # each bucket's min and max of each series survive: same envelope as the full line
    buckets = max(1, 2000 // 6)
    b = np.minimum(((x - x[0]) / (x[-1] - x[0]) * buckets).astype(int), buckets - 1)
    for y in (loss, acc):
        for k in (0, 137, buckets - 1):
            inside = np.flatnonzero(b == k)
            kept = np.intersect1d(inside, keep)
            assert np.nanmax(y[inside]) == np.nanmax(y[kept])
            assert np.nanmin(y[inside]) == np.nanmin(y[kept])
    assert minmax_indices(x[:50], [loss[:50]], 2000).tolist() == list(range(50))
    assert len(minmax_indices(x, [loss], 0)) == x.size  # 0: everything


def _master(tmp_path: Path) -> tuple[Master, int, int]:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    config = {"name": "data", "entrypoint": "python3 train.py",
              "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.2]}},
              "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"epochs": 3}}}
    exp = master.create_experiment(config, base64.b64encode(pack(tmp_path / "model")).decode())
    for t in master.store.trials(exp):  # as if launched: only running trials report
        master.store.update_trial(t["id"], state="RUNNING")
    trial = master.store.trials(exp)[0]["id"]
    return master, exp, trial


def test_series_cache_reads_only_new_rows_and_rebuilds_after_a_restart(tmp_path: Path) -> None:
    master, _, trial = _master(tmp_path)
    for s in range(1, 6):
        master.report_metrics(trial, "training", s * 10, s // 3, {"loss": 1.0 / s})
    cache = SeriesCache(master.store)
    first = cache.get(trial, "training")
    assert first.steps == [10, 20, 30, 40, 50]

    calls = []
    real = master.store.metric_columns
    master.store.metric_columns = (  # type: ignore[method-assign]
        lambda *a: calls.append(a) or real(*a))
    master.report_metrics(trial, "training", 60, 2, {"loss": 0.1, "accuracy": 0.9})
    again = cache.get(trial, "training")
    assert again is first and again.steps[-1] == 60
    assert calls == [(trial, "training", 50)]  # only past the last step held
    assert again.values["accuracy"][:5] == [math.nan] * 5 or all(
        math.isnan(v) for v in again.values["accuracy"][:5])
    assert again.values["accuracy"][5] == 0.9

    # a restart from the checkpoint at step 30 reports 40 again, with another value
    master.store.update_trial(trial, restarts=1)
    master.report_metrics(trial, "training", 40, 1, {"loss": 7.0})
    rebuilt = cache.get(trial, "training")
    assert rebuilt is not first and rebuilt.values["loss"][3] == 7.0


def test_series_json_downsamples_and_zooms() -> None:
    s = Series()
    for i in range(1, 10_001):
        s.append(i, i // 1000, 1000.0 + i, {"loss": math.sin(i / 100) + (50 if i == 4321 else 0)})
    out = s.to_json(400, t0=1000.0)
    assert out["total"] == 10_000 and out["downsampled"] and len(out["steps"]) <= 400
    assert 4321 in out["steps"] and max(out["metrics"]["loss"]) > 49
    assert out["time"][0] == 1.0  # relative to t0
    zoomed = s.to_json(400, x_range=(4000, 4100))
    assert zoomed["steps"] == list(range(4000, 4101)) and not zoomed["downsampled"]
    assert len(s.to_json(0)["steps"]) == 10_000
    assert s.steps_per_epoch() == 1000


def test_views_summaries_and_trial_metrics(tmp_path: Path) -> None:
    master, exp, trial = _master(tmp_path)
    other = master.store.trials(exp)[1]["id"]
    master.report_metrics(trial, "validation", 10, 1, {"val_loss": 0.5})
    master.report_metrics(other, "validation", 10, 1, {"val_loss": 0.25})
    master.report_metrics(other, "validation", 20, 2, {"val_loss": 0.75})
    views = Views(master)
    [row] = views.experiments()["experiments"]
    assert (row["state"], row["searcher"], row["metric"], row["trials"]) == (
        "ACTIVE", "grid", "val_loss", 2)
    assert row["best"] == 0.25 and row["smaller_is_better"] is True

    page = views.experiment(exp)
    assert page["hparam_names"] == ["lr"]
    assert {t["id"]: t["validation"] for t in page["trials"]} == {
        trial: {"val_loss": 0.5}, other: {"val_loss": 0.75}}  # the latest, not the best
    curves = views.curves(exp)
    assert curves["unit"] == "epochs"
    assert [(t["id"], t["epoch"], t["value"]) for t in curves["trials"]] == [
        (trial, [1], [0.5]), (other, [1, 2], [0.25, 0.75])]
    metrics = views.metrics(other, 100)
    assert metrics["groups"]["validation"]["metrics"] == {"val_loss": [0.25, 0.75]}
    assert metrics["steps_per_epoch"] == 10


def test_views_show_nested_hyperparameters_by_dotted_name(tmp_path: Path) -> None:
    """Issue 23: the experiment's table/charts and the trial page get nested leaves as
    ``optimizer.learning_rate``; the API rows keep them nested."""
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    config = {"entrypoint": "python3 train.py", "searcher": {"name": "grid"},
              "hyperparameters": {
                  "bs": 32,
                  "optimizer": {"learning_rate": {"type": "log", "minval": -3, "maxval": -1,
                                                  "count": 2},
                                "name": {"type": "categorical", "vals": ["sgd", "adam"]}},
                  "layers": {"dense": {"units": 8}}}}
    exp = master.create_experiment(config, base64.b64encode(pack(tmp_path / "model")).decode())
    views = Views(master)
    page = views.experiment(exp)
    assert page["hparam_names"] == ["bs", "layers.dense.units", "optimizer.learning_rate",
                                    "optimizer.name"]
    assert page["hparam_log"] == ["optimizer.learning_rate"]
    rows = sorted((round(t["hparams_flat"]["optimizer.learning_rate"], 9),
                   t["hparams_flat"]["optimizer.name"]) for t in page["trials"])
    assert rows == sorted((lr, n) for lr in (0.001, 0.1) for n in ("sgd", "adam"))
    first = page["trials"][0]
    assert first["hparams"]["optimizer"]["name"] == first["hparams_flat"]["optimizer.name"]
    trial = views.trial(first["id"])
    assert trial["hparams_flat"] == {"bs": 32, "layers.dense.units": 8,
                                     "optimizer.learning_rate": first["hparams_flat"][
                                         "optimizer.learning_rate"],
                                     "optimizer.name": first["hparams_flat"]["optimizer.name"]}
    assert trial["hparams"]["layers"] == {"dense": {"units": 8}}


def test_read_log_tail_and_follow(tmp_path: Path) -> None:
    log = tmp_path / "logs.txt"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    tail = read_log(log, -100)
    assert tail["text"].startswith("line ") and tail["text"].endswith("line 999\n")
    assert tail["offset"] == log.stat().st_size
    with open(log, "a") as f:
        f.write("more\n")
    assert read_log(log, tail["offset"])["text"] == "more\n"
    assert read_log(tmp_path / "none.txt", 0) == {"text": "", "start": 0, "offset": 0,
                                                 "size": 0}


def test_ui_routes_need_a_user_and_serve_gzipped_static_files(tmp_path: Path) -> None:
    master, exp, trial = _master(tmp_path)
    token = master.user_token()
    client = TestClient(create_app(master))
    assert client.get("/ui/api/experiments").status_code == 401
    assert client.get("/ui/", follow_redirects=False).headers["location"] == "/ui/signin"
    auth = {"Authorization": f"Bearer {token}"}
    assert client.get("/ui/api/experiments", headers=auth).json()["experiments"][0]["id"] == exp

    js = client.get("/ui/static/app.js", headers={"Accept-Encoding": "gzip"})
    assert js.status_code == 200 and js.headers["content-encoding"] == "gzip"
    assert js.headers["content-type"].startswith("text/javascript")
    again = client.get("/ui/static/app.js", headers={"If-None-Match": js.headers["etag"]})
    assert again.status_code == 304
    assert client.get("/ui/static/vendor/uplot/LICENSE").text.startswith("The MIT License")
    assert client.get("/ui/static/../app.py").status_code == 404

    huge = client.post("/ui/signin", content=b"token=" + b"x" * 100_000,
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert huge.status_code == 413
    code = client.post("/ui/api/signin-codes", headers=auth).json()
    signed = client.get(code["path"], follow_redirects=False)
    assert signed.status_code == 303 and "httponly" in signed.headers["set-cookie"].lower()
    assert client.get(f"/ui/api/trials/{trial}/metrics").json()["groups"] == {}
    assert client.post(f"/ui/api/experiments/{exp}/pause").status_code == 403  # no header
    paused = client.post(f"/ui/api/experiments/{exp}/pause", headers={"X-Det-UI": "1"})
    assert paused.json()["state"] == master.store.experiment(exp)["state"] != "ACTIVE"
    assert json.loads(client.get(f"/ui/api/experiments/{exp}").text)["state"] == paused.json()[
        "state"]
    assert client.post(f"/ui/api/experiments/{exp}/explode",
                       headers={"X-Det-UI": "1"}).status_code == 404


def _search(master: Master, trials: int, validations: int, smaller_is_better: bool,
            seed: int = 0) -> tuple[int, dict[int, float]]:
    """An experiment of ``trials`` trials, each with ``validations`` reports of val_loss
    (known lowest and highest values mid-curve), reported as the master does; returns it
    and each trial's distinct rank (the lower, the lower its whole curve)."""
    config = {"name": "big", "searcher": {"name": "random", "metric": "val_loss",
                                          "smaller_is_better": smaller_is_better,
                                          "max_length": {"epochs": validations}}}
    exp = master.store.create_experiment_with_trials(
        config, "archive", [{"hparams": {}, "seed": i, "bracket": 0, "target": None}
                            for i in range(trials)])
    ids = [t["id"] for t in master.store.trials(exp)]
    rng = np.random.default_rng(seed)
    rank = dict(zip(ids, rng.permutation(trials).tolist(), strict=True))
    for i in ids:
        low, high = rng.integers(1, validations - 1, 2)  # a spike down and one up, inside
        for j in range(validations):
            v = 1.0 + rank[i] + 0.3 * math.sin(j / 5)
            v = v - 0.5 if j == low else v + 0.9 if j == high and high != low else v
            master.store.record_metrics(i, "validation", (j + 1) * 10, j + 1, {"val_loss": v},
                                        v, smaller_is_better)
    return exp, rank


@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_curves_show_the_best_trials_downsampled_with_their_extremes(
        tmp_path: Path, smaller_is_better: bool) -> None:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    exp, rank = _search(master, 300, 60, smaller_is_better)
    views = Views(master)
    statements: list[str] = []
    master.store._db.set_trace_callback(statements.append)
    curves = views.curves(exp, max_trials=40, max_points=20)
    master.store._db.set_trace_callback(None)

    assert curves["total_trials"] == 300 and curves["metric"] == "val_loss"
    assert curves["unit"] == "epochs"
    by_rank = sorted(rank, key=rank.__getitem__)  # lowest curves first
    best = by_rank[:40] if smaller_is_better else by_rank[-40:]
    assert [t["id"] for t in curves["trials"]] == sorted(best)
    full: dict[int, list[float]] = {}
    for trial_id, _, _, value in master.store.validation_metric(best, "val_loss"):
        full.setdefault(trial_id, []).append(value)
    for t in curves["trials"]:
        assert len(t["steps"]) == len(t["epoch"]) == len(t["value"]) <= 20
        assert t["steps"] == sorted(set(t["steps"]))
        assert t["steps"][0] == 10 and t["steps"][-1] == 600  # first and last stay
        assert min(t["value"]) == min(full[t["id"]]) and max(t["value"]) == max(full[t["id"]])
        assert t["epoch"] == [s // 10 for s in t["steps"]]
    # every point with max_points=0; 200 (the default) is more than 60 validations
    assert all(len(t["value"]) == 60 for t in views.curves(exp, 40, 0)["trials"])
    assert views.curves(exp)["trials"] == views.curves(exp, 50, 0)["trials"]
    assert len(views.curves(exp)["trials"]) == 50

    # reads: the trials' index (a LIMIT), a count, and the chosen trials' metric rows
    plans: list[str] = []
    for sql in statements:
        if " FROM trials" in sql or " FROM metrics" in sql:
            plans += [r[3] for r in master.store._db.execute(f"EXPLAIN QUERY PLAN {sql}")]
    assert plans and not [p for p in plans if p.startswith("SCAN")], plans
    assert any("SEARCH metrics USING" in p for p in plans)
    assert any("SEARCH trials USING COVERING INDEX" in p for p in plans)


def test_best_trials_puts_trials_without_a_metric_last_and_ties_by_id(tmp_path: Path) -> None:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    exp = master.store.create_experiment_with_trials(
        {}, "archive", [{"hparams": {}, "seed": i, "bracket": 0, "target": None}
                        for i in range(6)])
    ids = [t["id"] for t in master.store.trials(exp)]
    for i, best in zip(ids, [None, 0.5, 0.2, 0.5, None, 0.9], strict=True):
        master.store.update_trial(i, best_metric=best)
    store = master.store
    assert store.best_trials(exp, 2) == ([ids[1], ids[2]], 6)  # 0.2, then the first 0.5
    assert store.best_trials(exp, 2, smaller_is_better=False) == ([ids[1], ids[5]], 6)
    assert store.best_trials(exp, 5) == (sorted([ids[2], ids[1], ids[3], ids[5], ids[0]]), 6)
    assert store.best_trials(exp, 100, False) == (ids, 6)
    assert store.best_trials(exp + 1, 10) == ([], 0)


def test_curves_route_bounds_its_parameters(tmp_path: Path) -> None:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    exp, _ = _search(master, 12, 30, True)
    auth = {"Authorization": f"Bearer {master.user_token()}"}
    client = TestClient(create_app(master))
    path = f"/ui/api/experiments/{exp}/curves"
    got = client.get(path, headers=auth, params={"max_trials": 5, "max_points": 8}).json()
    assert got == Views(master).curves(exp, 5, 8)
    assert len(got["trials"]) == 5 and got["total_trials"] == 12
    assert all(len(t["value"]) <= 8 for t in got["trials"])
    assert len(client.get(path, headers=auth).json()["trials"]) == 12  # default: 50
    for name, bad in [("max_trials", 0), ("max_trials", 501), ("max_trials", "many"),
                      ("max_points", -1), ("max_points", 5001)]:
        r = client.get(path, headers=auth, params={name: bad})
        assert r.status_code == 400, (name, bad)
        assert [d["loc"] for d in r.json()["detail"]] == [["query", name]], r.json()
    assert client.get("/ui/api/experiments/999/curves", headers=auth).status_code == 404
