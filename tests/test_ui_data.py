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
