"""Who may call each route (issue 59): det_sdk.master.permissions' table covers every
route of the app (a new route without a rule fails here, and is refused at run time),
and the whole route table, walked, refuses a non-admin who does not own the thing, a
deactivated user and a task's token wherever the table says so.

In-process (FastAPI's TestClient) over a real master's SQLite store, never started.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from det_sdk.master.app import create_app
from det_sdk.master.core import Master
from det_sdk.master.permissions import ADMIN, PUBLIC, RULES, TOKEN, USER, Owner, Self, route_rules


def _setup(tmp_path: Path) -> tuple[Master, Any, dict[str, str]]:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    app = create_app(master)
    admin = TestClient(app, headers={"Authorization": f"Bearer {master.user_token()}"})
    tokens = {}
    for name in ("ann", "gone"):
        r = admin.post("/api/v1/users", json={"user": {"username": name},
                                              "password": f"{name}-password"})
        assert r.status_code == 201, r.text
        login = admin.post("/api/v1/auth/login", json={"username": name,
                                                       "password": f"{name}-password"})
        tokens[name] = login.json()["token"]
    return master, app, tokens


def test_every_route_has_a_rule_and_every_rule_a_route(tmp_path: Path) -> None:
    _, app, _ = _setup(tmp_path)
    routes = list(route_rules(app))
    assert len(routes) > 80
    missing = [(m, p) for m, p, rule in routes if rule is None]
    assert not missing, f"routes without a rule in det_sdk.master.permissions.RULES: {missing}"
    stale = set(RULES) - {(m, p) for m, p, _ in routes}
    assert not stale, f"rules of routes that do not exist: {stale}"


def test_a_route_without_a_rule_is_refused_even_to_an_admin(tmp_path: Path) -> None:
    master, app, _ = _setup(tmp_path)

    @app.get("/api/v1/forgotten")
    def forgotten() -> dict[str, str]:
        return {"secret": "x"}

    admin = TestClient(app, headers={"Authorization": f"Bearer {master.user_token()}"})
    r = admin.get("/api/v1/forgotten")
    assert r.status_code == 403 and "no permission rule" in r.json()["detail"]


def _fill(path: str, ids: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: ids.get(m.group(1), "x"), path)


def test_the_route_table_walked_as_a_non_owner_a_deactivated_user_and_a_task(
        tmp_path: Path) -> None:
    master, app, tokens = _setup(tmp_path)
    admin = TestClient(app, headers={"Authorization": f"Bearer {master.user_token()}"})
    # the admin's: an experiment with a trial, a batch job row, a model, a checkpoint
    exp = master.store.create_experiment_with_trials(
        {"name": "admin's"}, "a.tgz", [{"hparams": {}, "seed": 1, "bracket": 0,
                                        "target": None}])
    trial = master.store.trials(exp)[0]["id"]
    job = master.store.create_job({"name": "j"}, "a.tgz")
    assert admin.post("/api/v1/models", json={"name": "mine"}).status_code == 200
    cmd = master.commands.table.insert(
        {"entrypoint": ["true"], "resources": {"slots": 0}}, "a.tgz", owner_id=1)
    master.store.create_allocation({"id": "a1", "task_type": "TRIAL", "trial_id": trial,
                                    "token": "task-token", "state": "RUNNING", "slots": 1,
                                    "started": time.time()})
    ids = {"exp_id": str(exp), "trial_id": str(trial), "job_id": str(job), "ident": "mine",
           "user_id": "1", "username": "determined", "verb": "kill", "alloc_id": "a1",
           "uuid": "nope", "version": "1", "tb_id": "0000", "name": "app.js",
           "webhook_id": "1", "cmd_id": str(cmd)}
    # the admin's shell (issue 58: a command of kind shell, with its keys)
    shell = master.commands.table.insert(
        {"entrypoint": ["true"], "resources": {"slots": 0}}, "a.tgz", owner_id=1, kind="shell")
    master.shells.table.insert(shell, "PRIVATE", "ssh-ed25519 AAAA")
    ids["shell_id"] = str(shell)
    # the admin's workspace and project (issue 59)
    ws = master.store.create_workspace("admins", owner_id=1)
    ids["ws_id"] = str(ws)
    ids["project_id"] = str(master.store.create_project(ws, "theirs", "", owner_id=1))
    # the admin's notebook (issue 58: a command of kind notebook), and a path behind its proxy
    nb = master.commands.table.insert(
        {"entrypoint": ["true"], "resources": {"slots": 0}}, "a.tgz", owner_id=1,
        kind="notebook")
    master.notebooks.table.insert(nb, None, "kernels_or_terminals")
    ids["nb_id"], ids["path"] = str(nb), "lab"
    ann = TestClient(app, headers={"Authorization": f"Bearer {tokens['ann']}"})
    task = TestClient(app, headers={"Authorization": "Bearer task-token"})
    gone = TestClient(app, headers={"Authorization": f"Bearer {tokens['gone']}"})
    gone_id = admin.get("/api/v1/users/gone/by-username").json()["user"]["id"]
    r = admin.patch(f"/api/v1/users/{gone_id}", json={"active": False})
    assert r.status_code == 200 and r.json()["user"]["active"] is False

    walked = 0
    for method, path, rule in route_rules(app):
        url = _fill(path, ids)
        body = {"json": {}} if method in ("POST", "PATCH", "DELETE") else {}
        if isinstance(rule, Owner) and rule.kind == "tensorboard":
            continue  # none exists: 404 for everyone (the owner's check needs one)
        if rule in (ADMIN,) or isinstance(rule, (Owner, Self)):
            r = ann.request(method, url, **body)
            assert r.status_code == 403, (method, path, r.status_code, r.text)
            assert "'ann'" in r.json()["detail"], r.text  # it names who and what
            walked += 1
        if rule in (USER, ADMIN) or isinstance(rule, (Owner, Self)):
            # outside /api/ (the web UI's data, the Prometheus scrape) a task's token is
            # no token at all: not signed in
            r = task.request(method, url, **body)
            assert r.status_code == (403 if path.startswith("/api/") else 401), \
                (method, path, r.status_code, r.text)
        if rule != PUBLIC:
            r = gone.request(method, url, **body)
            assert r.status_code == 401, (method, path, r.status_code, r.text)
        if rule == TOKEN:
            assert path.startswith("/api/")
    assert walked >= 20
    # a shell's key is its owner's: another user's read is refused too
    r = ann.get(f"/api/v1/shells/{shell}/key")
    assert r.status_code == 403 and "'ann'" in r.json()["detail"], r.text
    assert admin.get(f"/api/v1/shells/{shell}/key").json() == {"private_key": "PRIVATE"}
    # the same calls are the owner's or an admin's to make: the experiment's pause is
    r = admin.post(f"/api/v1/experiments/{exp}/pause")
    assert r.status_code == 200, r.text


def test_the_route_table_walked_as_a_viewer_and_as_an_editor_of_another_workspace(
        tmp_path: Path) -> None:
    """Roles (issue 59): in a workspace with assignments, a Viewer reads every route
    and is refused every change with a 403 naming the permission; an Editor of another
    workspace gets the same 404 as for a thing that does not exist."""
    master, app, tokens = _setup(tmp_path)
    admin = TestClient(app, headers={"Authorization": f"Bearer {master.user_token()}"})
    for name in ("eve",):
        admin.post("/api/v1/users", json={"user": {"username": name}, "password": "eve-password"})
        tokens[name] = admin.post("/api/v1/auth/login", json={
            "username": name, "password": "eve-password"}).json()["token"]
    ws = master.store.create_workspace("roled", owner_id=1)
    other = master.store.create_workspace("elsewhere", owner_id=1)
    project = master.store.create_project(ws, "p", "", owner_id=1)
    exp = master.store.create_experiment_with_trials(
        {"name": "admin's"}, "a.tgz", [{"hparams": {}, "seed": 1, "bracket": 0,
                                        "target": None}])
    master.store.move_experiment(exp, project)
    trial = master.store.trials(exp)[0]["id"]
    users = {u["username"]: u["id"] for u in admin.get("/api/v1/users").json()["users"]}

    def assign(user: str, role_id: int, scope: int | None) -> Any:
        return admin.post("/api/v1/roles/add-assignments", json={"userRoleAssignments": [
            {"userId": users[user], "roleAssignment": {"role": {"roleId": role_id},
                                                       "scopeWorkspaceId": scope}}]})

    roles = {r["name"]: r["roleId"] for r in
             admin.post("/api/v1/roles/search").json()["roles"]}
    assert assign("ann", roles["Viewer"], ws).status_code == 200
    assert assign("eve", roles["Editor"], other).status_code == 200
    ids = {"exp_id": str(exp), "trial_id": str(trial), "ws_id": str(ws),
           "project_id": str(project), "verb": "kill"}
    viewer = TestClient(app, headers={"Authorization": f"Bearer {tokens['ann']}"})
    editor = TestClient(app, headers={"Authorization": f"Bearer {tokens['eve']}"})
    walked = 0
    for method, path, rule in route_rules(app):
        scoped = [n for n in ("exp_id", "trial_id", "ws_id", "project_id")
                  if "{" + n in path]
        if rule == PUBLIC or not scoped:
            continue
        url = _fill(path, ids)
        body = {"json": {}} if method in ("POST", "PATCH", "DELETE") else {}
        r = editor.request(method, url, **body)
        assert r.status_code == 404 and r.json()["detail"].startswith("no "), \
            (method, path, r.status_code, r.text)
        r = viewer.request(method, url, **body)
        if method == "GET":
            assert r.status_code not in (401, 403), (method, path, r.status_code, r.text)
        else:
            assert r.status_code == 403, (method, path, r.status_code, r.text)
            assert "PERMISSION_TYPE_" in r.json()["detail"], r.text
        walked += 1
    assert walked >= 30
    # lists show only what the caller may see
    assert [e["id"] for e in viewer.get("/api/v1/experiments").json()["experiments"]] == [exp]
    assert editor.get("/api/v1/experiments").json()["experiments"] == []
    assert [e["id"] for e in viewer.get("/ui/api/experiments").json()["experiments"]] == [exp]
    assert editor.get("/ui/api/experiments").json()["experiments"] == []
    for url in ("/api/v1/compare", "/ui/api/compare"):
        r = editor.get(url, params={"experiment_ids": exp})
        assert r.status_code == 404 and r.json()["detail"] == f"no experiment {exp}", r.text
        r = editor.get(url, params={"trial_ids": trial})
        assert r.status_code == 404 and r.json()["detail"] == f"no trial {trial}", r.text
        assert viewer.get(url, params={"experiment_ids": exp}).status_code == 200
    r = editor.post("/api/v1/tensorboards", json={"experiment_ids": [exp]})
    assert r.status_code == 404 and r.json()["detail"] == f"no experiment {exp}", r.text
    r = editor.get("/ui/api/tensorboard-dirs", params={"experiment_ids": str(exp)})
    assert r.status_code == 404 and r.json()["detail"] == f"no experiment {exp}", r.text
    assert viewer.get("/ui/api/tensorboard-dirs",
                      params={"experiment_ids": str(exp)}).status_code == 200
    # the queue and the running tasks leave out what the caller may not see
    master.store.create_allocation({"id": "a9", "task_type": "TRIAL", "trial_id": trial,
                                    "token": "task-token-9", "state": "RUNNING", "slots": 1,
                                    "started": time.time()})
    assert "a9" in {t["id"] for t in viewer.get("/api/v1/tasks").json()["tasks"]}
    assert "a9" not in {t["id"] for t in editor.get("/api/v1/tasks").json()["tasks"]}
    queue = admin.get("/api/v1/job-queue").json()["jobs"]
    assert viewer.get("/api/v1/job-queue").json()["jobs"] == queue
    assert (exp, "EXPERIMENT") not in {(j["id"], j["type"]) for j in
                                       editor.get("/api/v1/job-queue").json()["jobs"]}
    # a checkpoint of a trial in the workspace: as none such to the Editor of another
    uuid = "c0ffee00-0000-4000-8000-000000000001"
    master.store.put_checkpoint({"uuid": uuid, "trial_id": trial, "steps_completed": 1,
                                 "epoch": 0})
    r = editor.get(f"/api/v1/checkpoints/{uuid}")
    assert r.status_code == 404 and uuid in r.json()["detail"], r.text
    assert editor.get("/api/v1/checkpoints").json()["checkpoints"] == []
    assert [c["uuid"] for c in viewer.get("/api/v1/checkpoints").json()["checkpoints"]] == [
        uuid]
    assert viewer.get(f"/api/v1/checkpoints/{uuid}").status_code == 200
    names = {w["name"] for w in editor.get("/api/v1/workspaces").json()["workspaces"]}
    assert names == {"Uncategorized", "elsewhere"}
    # the Editor may not hand out roles on a workspace it only edits; an admin may
    r = editor.post("/api/v1/roles/add-assignments", json={"userRoleAssignments": [
        {"userId": users["eve"], "roleAssignment": {"role": {"roleId": roles["Viewer"]},
                                                    "scopeWorkspaceId": ws}}]})
    assert r.status_code == 403 and "PERMISSION_TYPE_ASSIGN_ROLES" in r.json()["detail"]
    # a ClusterAdmin is an admin's equal: admin-only routes answer
    assert viewer.get("/api/v1/webhooks").status_code == 403
    assert assign("ann", roles["ClusterAdmin"], None).status_code == 200
    assert viewer.get("/api/v1/webhooks").status_code == 200
    assert viewer.post(f"/api/v1/experiments/{exp}/archive").status_code != 403
