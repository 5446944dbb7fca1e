"""Two admins changing roles at once (issue 59's hostile input): every assignment and
removal lands whole, one row per (user, role, workspace), none lost or doubled.

In-process (FastAPI's TestClient) over a real master's SQLite store, never started.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fastapi.testclient import TestClient

from det_sdk.master.app import create_app
from det_sdk.master.core import Master


def test_two_admins_assigning_and_removing_roles_at_once(tmp_path: Path) -> None:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    app = create_app(master)
    admin = TestClient(app, headers={"Authorization": f"Bearer {master.user_token()}"})
    uids = []
    for i in range(4):
        r = admin.post("/api/v1/users", json={"user": {"username": f"u{i}"},
                                              "password": f"u{i}-password-long"})
        assert r.status_code == 201, r.text
        uids.append(r.json()["user"]["id"])
    ws = master.store.create_workspace("shared", owner_id=1)

    def body(uid: int, role: int) -> dict[str, object]:
        return {"userRoleAssignments": [{"userId": uid, "roleAssignment": {
            "role": {"roleId": role}, "scopeWorkspaceId": ws}}]}

    def assign(k: int) -> int:
        # both "admins" give every user the same roles, interleaved
        return admin.post("/api/v1/roles/add-assignments",
                          json=body(uids[k % 4], 2 + k % 3)).status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(assign, range(48))) == {200}
    rows = master.store.role_assignments()
    assert len(rows) == len({(r["user_id"], r["role"], r["workspace_id"]) for r in rows})
    assert len(rows) == 12  # 4 users x 3 workspace roles, each once

    def remove(k: int) -> int:
        return admin.post("/api/v1/roles/remove-assignments",
                          json=body(uids[k % 4], 2 + k % 3)).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(remove, range(24)))
    # each assignment removed exactly once; the second removal of it is a 404
    assert codes.count(200) == 12 and codes.count(404) == 12
    assert master.store.role_assignments() == []
