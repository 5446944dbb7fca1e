"""A team on one master, part 3 (issue 59): Determined's roles through the real `det`
CLI against one real master: three users (ann, bob, cat) and two workspaces (vision,
audio). Experiments are the lifecycle harness's, created PAUSED (no trial process): who
may see and change them is what is tested.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from harness.master import DET, Cluster, running_cluster
from tests.lifecycle_harness import Fakes, config

pytestmark = pytest.mark.stack_neutral

PASSWORDS = {"ann": "ann-first-password", "bob": "bob-first-password",
             "cat": "cat-first-password"}


class Person:
    """One user at their own terminal: `det` with their HOME (their saved token)."""

    def __init__(self, c: Cluster, name: str) -> None:
        self.c, self.name = c, name
        self.home = c.root / f"home-{name}"
        self.home.mkdir(exist_ok=True)

    def det(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**self.c.env, "HOME": str(self.home), "DET_PASS": PASSWORDS[self.name]}
        return subprocess.run([str(DET), *args], env=env, capture_output=True, text=True,
                              timeout=120, cwd=self.c.root)

    def json(self, *args: str) -> Any:
        return json.loads(ok(self.det(*args, "--json")))

    @property
    def token(self) -> str:
        return str(json.loads((self.home / ".det" / "credentials.json").read_text())[
            self.c.url])


def ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def refused(out: subprocess.CompletedProcess[str], *words: str) -> str:
    assert out.returncode != 0, out.stdout + out.stderr
    for word in words:
        assert word in out.stderr, out.stderr
    return out.stderr


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("roles")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def people(c: Cluster) -> dict[str, Person]:
    out = {}
    for name, password in PASSWORDS.items():
        ok(c.det("user", "create", name, "--password", password))
        out[name] = Person(c, name)
        ok(out[name].det("user", "login", name))
    return out


def paused(c: Cluster, token: str, project_id: int) -> Any:
    """A PAUSED experiment of the fake trial, made by the user of ``token``."""
    fakes = Fakes(c, c.root / "control")
    body = {"config": config(c.root / "control"), "model_definition": fakes.archive,
            "activate": False, "project_id": project_id}
    with c.http(token=token) as http:
        return http.post("/api/v1/experiments", json=body)


def _ids(rows: list[dict[str, Any]]) -> set[int]:
    return {r["id"] for r in rows}


def test_roles_decide_who_sees_and_changes_what(c: Cluster, people: dict[str, Person]
                                               ) -> None:
    ann, bob, cat = people["ann"], people["bob"], people["cat"]
    ok(c.det("workspace", "create", "vision"))
    ok(c.det("workspace", "create", "audio"))
    vision = c.det_json("project", "create", "vision", "v1")["id"]
    audio = c.det_json("project", "create", "audio", "a1")["id"]
    # before any role: everyone sees everything (the rules from before roles)
    r = paused(c, c.token, audio)
    assert r.status_code == 201, r.text
    in_audio = r.json()["id"]
    assert in_audio in _ids(ann.json("e", "list", "--all"))
    # Determined's four roles and their permissions
    listed = {r["name"]: r for r in ann.json("rbac", "list-roles")}
    assert list(listed) == ["ClusterAdmin", "WorkspaceAdmin", "Editor", "Viewer"]
    assert [p["name"] for p in listed["Viewer"]["permissions"]] == [
        "PERMISSION_TYPE_VIEW_WORKSPACE"]
    assert "ClusterAdmin" not in ok(ann.det("rbac", "list-roles", "--exclude-global-roles"))
    # careless input: named refusals, nothing assigned
    refused(c.det("rbac", "assign-role", "Wizard", "-u", "ann", "-w", "vision"),
            "Wizard", "Viewer")
    refused(c.det("rbac", "assign-role", "Viewer", "-u", "nobody", "-w", "vision"), "nobody")
    refused(c.det("rbac", "assign-role", "Viewer", "-u", "ann", "-w", "nowhere"), "nowhere")
    refused(c.det("rbac", "assign-role", "Viewer", "-g", "team", "-w", "vision"), "groups")
    refused(c.det("rbac", "assign-role", "ClusterAdmin", "-u", "ann", "-w", "vision"),
            "cluster-wide")
    refused(ann.det("rbac", "assign-role", "Editor", "-u", "ann", "-w", "vision"),
            "403", "PERMISSION_TYPE_ASSIGN_ROLES")
    assert ann.json("rbac", "my-permissions") == []
    # the roles: ann views vision, bob edits vision, cat edits audio
    assert "assigned" in ok(c.det("rbac", "assign-role", "Viewer", "-u", "ann", "-w",
                                  "vision"))
    ok(c.det("rbac", "assign-role", "Editor", "-u", "bob", "-w", "vision"))
    ok(c.det("rbac", "assign-role", "editor", "-u", "cat", "-w", "audio"))
    mine = ann.json("rbac", "my-permissions")
    assert [(a["role"]["name"], a["scopeWorkspaceId"]) for a in mine] == [
        ("Viewer", c.det_json("workspace", "describe", "vision")["id"])]
    assert "Editor" in ok(c.det("rbac", "list-users-roles", "bob"))
    # an Editor creates and kills in its workspace
    r = paused(c, bob.token, vision)
    assert r.status_code == 201, r.text
    bobs = r.json()["id"]
    ok(bob.det("e", "kill", str(bobs)))
    # ... and may not file into a workspace it has no role on (the same 404 as none such)
    r = paused(c, bob.token, audio)
    assert r.status_code == 404 and "no project" in r.json()["detail"], r.text
    # a Viewer sees its workspace's experiments, not the other's
    seen = _ids(ann.json("e", "list", "--all"))
    assert bobs in seen and in_audio not in seen
    hidden = refused(ann.det("e", "describe", str(in_audio)), "404")
    missing = refused(ann.det("e", "describe", "99999"), "404")
    assert hidden.replace(str(in_audio), "N") == missing.replace("99999", "N")
    # ... and gets a 403 naming the permission on a change in its own workspace
    refused(ann.det("e", "kill", str(bobs)), "403", "PERMISSION_TYPE_UPDATE_EXPERIMENT")
    refused(ann.det("e", "archive", str(bobs)), "403", "PERMISSION_TYPE_UPDATE_EXPERIMENT")
    # cat's Editor role on audio lets it kill the admin's experiment there
    ok(cat.det("e", "kill", str(in_audio)))
    assert {w["name"] for w in cat.json("workspace", "list")} == {"Uncategorized", "audio"}
    # Uncategorized has no roles: as before, all see it, each changes only their own
    r = paused(c, ann.token, 1)
    assert r.status_code == 201, r.text
    anns = r.json()["id"]
    assert anns in _ids(cat.json("e", "list", "--all"))
    refused(cat.det("e", "kill", str(anns)), "403", "another user's")
    # unassign: ann no longer sees vision
    ok(c.det("rbac", "unassign-role", "Viewer", "-u", "ann", "-w", "vision"))
    refused(c.det("rbac", "unassign-role", "Viewer", "-u", "ann", "-w", "vision"), "404")
    refused(ann.det("e", "describe", str(bobs)), "404")
    # a deactivated user is refused everywhere
    ok(c.det("user", "deactivate", "cat"))
    refused(cat.det("e", "list"), "401")
    refused(cat.det("rbac", "my-permissions"), "401")


def test_the_client_and_the_web_ui_show_a_viewer_only_its_workspace(
        c: Cluster, people: dict[str, Person]) -> None:
    """The same roles seen through the Python client (as Determined's users call it) and
    the web UI in Chromium: ann views "maps"; "text" has roles (bob edits it), not hers."""
    from det_sdk.client import MasterError
    from det_sdk.experimental.client import Determined

    ok(c.det("workspace", "create", "maps"))
    ok(c.det("workspace", "create", "text"))
    maps = c.det_json("project", "create", "maps", "m1")["id"]
    text = c.det_json("project", "create", "text", "t1")["id"]
    in_maps, in_text = (paused(c, c.token, p).json()["id"] for p in (maps, text))
    ok(c.det("rbac", "assign-role", "Viewer", "-u", "ann", "-w", "maps"))
    ok(c.det("rbac", "assign-role", "Editor", "-u", "bob", "-w", "text"))

    ann = Determined(c.url, user="ann", password=PASSWORDS["ann"])
    seen = {e.id for e in ann.list_experiments()}
    assert in_maps in seen and in_text not in seen
    with pytest.raises(MasterError, match="404"):
        ann.get_experiment(in_text).reload()
    with pytest.raises(MasterError, match="403"):
        ann.get_experiment(in_maps).kill()
    bob = Determined(c.url, user="bob", password=PASSWORDS["bob"])
    assert in_text in {e.id for e in bob.list_experiments()}

    # a running trial in "text": its slot shows as held, not by what; its checkpoint
    # cannot become ann's model version (the same 404 as none such)
    fakes = Fakes(c, c.root / "control")
    running = fakes.create(name="running-in-text", workspace="text", project="t1")
    trial = fakes.trial_of(running)["id"]
    fakes.wait_started(trial, timeout=120)
    uuid = fakes.send(trial, "report") and fakes.send(trial, "checkpoint")["uuid"]
    held = [s for s in people["ann"].json("slot", "list") if s["type"]]
    assert held and all(s["task_id"] is None for s in held), held
    assert f"trial-{trial}" in {s["task_id"] for s in c.det_json("slot", "list")}
    ok(people["ann"].det("model", "create", "ann-model"))
    with c.http(token=people["ann"].token) as http:
        r = http.post("/api/v1/models/ann-model/versions", json={"checkpoint_uuid": uuid})
        assert r.status_code == 404 and "no checkpoint" in r.text, r.text
    ok(people["bob"].det("model", "create", "bob-model"))  # bob edits "text": he may
    with c.http(token=people["bob"].token) as http:
        r = http.post("/api/v1/models/bob-model/versions", json={"checkpoint_uuid": uuid})
        assert r.status_code in (200, 201), r.text
    ok(c.det("e", "kill", str(running)))

    from harness.browser import missing_reason, open_browser, signed_in_context

    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    with open_browser() as browser:
        context = signed_in_context(browser, c.url, people["ann"].token)
        page = context.new_page()
        page.goto(f"{c.url}/ui/#/experiments")
        page.wait_for_selector(f'tr[data-id="{in_maps}"]', timeout=60_000)
        assert page.locator(f'tr[data-id="{in_text}"]').count() == 0
        page.goto(f"{c.url}/ui/#/experiments/{in_text}")
        page.wait_for_selector("text=no experiment", timeout=60_000)
        context.close()
