"""The comparison's routes (``/api/v1/compare``, ``/ui/api/compare``) and their bounds,
in-process (FastAPI's TestClient) over a real master's SQLite store, never started:
trials and long series are written through the store, as trials would report them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from det_sdk.master.app import create_app
from det_sdk.master.core import Master

CONFIG = {"name": "many", "searcher": {"name": "random", "metric": "val_loss"},
          "checkpoint_storage": {"type": "s3", "bucket": "b", "access_key": "AKIAEXAMPLE",
                                 "secret_key": "very-secret-key"}}


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Master:
    return Master(Path(tmp_path_factory.mktemp("m")), slots=1, url="http://127.0.0.1:1")


@pytest.fixture(scope="module")
def http(master: Master) -> TestClient:
    return TestClient(create_app(master),
                      headers={"Authorization": f"Bearer {master.user_token()}"})


def _experiment(master: Master, n: int, config: dict[str, Any] = CONFIG) -> tuple[int, list[int]]:
    store = master.store
    exp = store.create_experiment_with_trials(config, "many", [
        {"hparams": {"lr": i / 100}, "seed": i, "bracket": 0, "target": None}
        for i in range(n)])
    ids = [t["id"] for t in store.trials(exp)]
    for i, t in enumerate(ids):  # trial i's val_loss: (i - 20)^2, the best are near 20
        store.record_metrics(t, "validation", 1, 0, {"val_loss": (i - 20.0) ** 2},
                             (i - 20.0) ** 2, True)
    return exp, ids


def test_more_trials_than_the_limit_are_refused_naming_it(master: Master,
                                                          http: TestClient) -> None:
    exp, ids = _experiment(master, 51)
    r = http.get("/api/v1/compare", params={"experiment_ids": exp})
    assert r.status_code == 400 and "51 trials" in r.text and "50" in r.text, r.text
    # each experiment's best few instead: the best by val_loss, in id order
    r = http.get("/api/v1/compare", params={"experiment_ids": exp, "best": 3})
    assert r.status_code == 200, r.text
    assert [t["id"] for t in r.json()["trials"]] == ids[19:22]
    assert http.get("/api/v1/compare", params={"experiment_ids": exp, "best": 51}
                    ).status_code == 400
    r = http.get("/api/v1/compare", params={"trial_ids": ids[:2], "max_points": 5001})
    assert r.status_code == 400 and "max_points" in r.text
    r = http.get("/api/v1/compare")
    assert r.status_code == 400 and "experiment_ids" in r.text


def test_long_series_are_downsampled_with_their_extremes_and_secrets_stay_masked(
        master: Master, http: TestClient) -> None:
    _, (trial,) = _experiment(master, 1)
    store = master.store
    for s in range(1, 4_001):  # one spike at step 1,234
        store.record_metrics(trial, "training", s, 0,
                             {"loss": 50.0 if s == 1_234 else 1.0 + s * 1e-5}, None, True)
    r = http.get("/api/v1/compare", params={"trial_ids": trial, "max_points": 100})
    assert r.status_code == 200, r.text
    series = r.json()["trials"][0]["series"]["training"]
    assert len(series["steps"]) <= 100 and series["total"] == 4_000 and series["downsampled"]
    assert 1_234 in series["steps"] and max(series["metrics"]["loss"]) == 50.0
    text = json.dumps(r.json())
    assert "very-secret-key" not in text and "AKIAEXAMPLE" not in text
    # the UI's route answers the same to a signed-in user, and nobody else
    ui = http.get("/ui/api/compare", params={"trial_ids": trial, "max_points": 100})
    assert ui.status_code == 200 and ui.json() == r.json()
    assert http.get("/ui/api/compare", params={"trial_ids": trial},
                    headers={"Authorization": ""}).status_code == 401
    assert http.get("/api/v1/compare", params={"trial_ids": trial},
                    headers={"Authorization": "Bearer nope"}).status_code == 401
