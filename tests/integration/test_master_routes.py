"""The master's app composed from one router per resource (issue 39): a path whose
methods live in different routers still answers 405 with all of them in ``Allow``, and
no route reaches past ``Master`` into its store.

In-process (FastAPI's TestClient) over a real master's SQLite store, never started.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from det_sdk.master.app import create_app
from det_sdk.master.core import Master

ROUTES = Path(__file__).resolve().parents[2] / "det_sdk" / "master" / "routes"


def test_405_names_the_methods_of_every_router_on_the_path(tmp_path: Path) -> None:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    http = TestClient(create_app(master),
                      headers={"Authorization": f"Bearer {master.user_token()}"})
    # GET from the trials router, POST from the tasks router
    r = http.put("/api/v1/trials/1/metrics")
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    # an included router with a prefix (the model registry)
    r = http.delete("/api/v1/models")
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    r = http.delete("/api/v1/experiments/1/pause")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["detail"] == "Method Not Allowed"


def test_a_task_s_reports_are_matched_first(tmp_path: Path) -> None:
    # FastAPI walks the included routers in order, every route of each before the one
    # that answers: the report routes (the master's hot path, bench_master_metrics.py)
    # lead, and a GET on the same path still reaches the trials router
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    app = create_app(master)
    first = app.router.routes[0]
    branch = getattr(getattr(first, "original_router", None), "routes", [first])
    assert {(r.path, m) for r in branch for m in getattr(r, "methods", ())} >= {
        ("/api/v1/trials/{trial_id}/metrics", "POST"),
        ("/api/v1/trials/{trial_id}/progress", "POST"), ("/api/v1/checkpoints", "POST")}
    http = TestClient(app, headers={"Authorization": f"Bearer {master.user_token()}"})
    r = http.get("/api/v1/trials/1/metrics")
    assert r.status_code == 404 and r.json() == {"detail": "no trial 1"}


def test_pause_answers_the_state_through_master(tmp_path: Path) -> None:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    http = TestClient(create_app(master),
                      headers={"Authorization": f"Bearer {master.user_token()}"})
    r = http.post("/api/v1/experiments/7/pause")
    assert r.status_code == 404 and r.json() == {"detail": "no experiment 7"}


def test_route_handlers_call_master_not_its_store() -> None:
    # wiring (a router's registry, the UI's sessions) may hold the store; handlers may not
    for module in sorted(ROUTES.glob("*.py")):
        for n, line in enumerate(module.read_text().splitlines(), 1):
            if "master.store" in line:
                assert module.name == "models.py" and "ModelRegistry(" in line, \
                    f"{module.name}:{n}: {line.strip()}"
