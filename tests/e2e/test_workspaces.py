"""A team on one master, part 2 (issue 59): workspaces and projects.

One real master for the module and the real `det` CLI, run by the first admin and by
``ann`` and ``bob`` (who sign in by password, each with a HOME of their own).
Experiments are created PAUSED (no trial process runs): where they are filed is what
is tested, not how they train.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.master import DET, Cluster, running_cluster
from tests.lifecycle_harness import TRIAL_DIR, Fakes, config

pytestmark = pytest.mark.stack_neutral

PASSWORDS = {"ann": "ann-first-password", "bob": "bob-first-password"}


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

    @property
    def token(self) -> str:
        import json

        return str(json.loads((self.home / ".det" / "credentials.json").read_text())[
            self.c.url])


def ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def refused(out: subprocess.CompletedProcess[str], *words: str) -> str:
    assert out.returncode == 1, out.stdout + out.stderr
    for word in words:
        assert word in out.stderr, out.stderr
    return out.stderr


def _rows(text: str) -> dict[str, list[str]]:
    """A table's rows by their first cell."""
    return {cells[0]: cells for cells in (re.split(r"\s{2,}|\s*\|\s*", line.strip())
                                          for line in text.splitlines()[1:]) if cells}


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("workspaces")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def people(c: Cluster) -> dict[str, Person]:
    out = {}
    for name, password in PASSWORDS.items():
        ok(c.det("user", "create", name, "--password", password))
        out[name] = Person(c, name)
        ok(out[name].det("user", "login", name))
    return out


def paused(c: Cluster, token: str, **fields: Any) -> Any:
    """Create a PAUSED experiment of the fake trial as the user of ``token``; the
    master's answer (the response)."""
    fakes = Fakes(c, c.root / "control")
    body = {"config": config(c.root / "control", **fields.pop("config", {})),
            "model_definition": fakes.archive, "activate": False, **fields}
    with c.http(token=token) as http:
        return http.post("/api/v1/experiments", json=body)


def test_workspaces_and_projects_through_the_cli(c: Cluster, people: dict[str, Person]
                                                 ) -> None:
    ann, bob = people["ann"], people["bob"]
    # the default workspace and project, Determined's, there from the start
    (ws,) = c.det_json("workspace", "list")
    assert (ws["id"], ws["name"], ws["immutable"]) == (1, "Uncategorized", True)
    (proj,) = c.det_json("project", "list", "Uncategorized")
    assert (proj["id"], proj["name"]) == (1, "Uncategorized")
    # any user makes a workspace and projects in it; names are unique
    made = ann.det("w", "create", "vision")
    assert "vision" in ok(made)
    refused(bob.det("workspace", "create", "vision"), "409", "already exists")
    with c.http(token=bob.token) as http:  # careless input: named refusals, nothing made
        r = http.post("/api/v1/workspaces", json={"name": "   "})
        assert r.status_code == 400 and "name" in r.json()["detail"]
        assert http.post("/api/v1/workspaces", json={"name": "x" * 500}).status_code == 400
        assert http.post("/api/v1/workspaces", json={"name": 5}).status_code == 400
        assert http.delete("/api/v1/workspaces/999").status_code == 404
        assert http.post("/api/v1/projects/999/archive").status_code == 404
        r = http.post("/api/v1/workspaces/999/projects", json={"name": "p"})
        assert r.status_code == 404
        r = http.post("/api/v1/experiments/1/move", json={"destinationProjectId": True})
        assert r.status_code == 400
    assert len(c.det_json("workspace", "list")) == 2
    ok(ann.det("p", "create", "vision", "mnist", "--description", "digits"))
    ok(ann.det("project", "create", "vision", "cifar"))
    listed = _rows(ok(c.det("project", "list", "vision")))
    assert {r[1] for r in listed.values()} == {"mnist", "cifar"}
    mnist = c.det_json("project", "describe", "vision", "mnist")
    assert mnist["description"] == "digits" and mnist["workspaceName"] == "vision"
    # det e create --project_id: into that project; the list's Workspace/Project columns
    cfg = c.root / "exp.yaml"
    cfg.write_text(yaml.safe_dump(config(c.root / "control", name="by-id")))
    out = ok(ann.det("e", "create", str(cfg), str(TRIAL_DIR), "--paused",
                     "--project_id", str(mnist["id"])))
    by_id = int(re.search(r"Created experiment (\d+)", out).group(1))  # type: ignore[union-attr]
    rows = _rows(ok(ann.det("e", "list", "--show_project")).replace("Uncategorized", "Unc"))
    # the first two columns are the workspace and project: key the rows by experiment id
    found = {r[2]: r for r in rows.values() if len(r) > 2}
    assert found[str(by_id)][:2] == ["vision", "mnist"]
    # the config's workspace and project, as Determined reads them (no warning about them)
    r = paused(c, ann.token, config={"name": "by-config", "workspace": "vision",
                                     "project": "cifar"})
    assert r.status_code == 201 and not any("workspace" in w for w in r.json()["warnings"])
    by_config = r.json()["id"]
    page = c.det_json("e", "list", "--all")
    where = {e["id"]: (e["workspace_name"], e["project_name"]) for e in page}
    assert where[by_config] == ("vision", "cifar") and where[by_id] == ("vision", "mnist")
    # bad names or ids: a clear refusal naming the field, nothing created
    before = len(page)
    r = paused(c, ann.token, config={"project": "cifar"})
    assert r.status_code == 400 and "workspace" in r.json()["detail"]
    r = paused(c, ann.token, config={"workspace": "vision", "project": "nope"})
    assert r.status_code == 404 and "project" in r.json()["detail"]
    r = paused(c, ann.token, project_id=999)
    assert r.status_code == 404 and "project_id" in r.json()["detail"]
    assert len(c.det_json("e", "list", "--all")) == before
    # filtered by project and by workspace, as the API and the web UI ask
    with c.http() as http:
        in_mnist = http.get("/api/v1/experiments", params={"project_id": mnist["id"]}).json()
        assert [e["id"] for e in in_mnist["experiments"]] == [by_id]
        in_ws = http.get("/api/v1/experiments", params={"workspace_id": mnist["workspaceId"]})
        assert {e["id"] for e in in_ws.json()["experiments"]} == {by_id, by_config}
    # deleting a project or workspace that holds experiments is refused; the defaults are
    # never deleted
    refused(c.det("project", "delete", "vision", "mnist", "--yes"), "409", "experiment")
    refused(c.det("workspace", "delete", "vision", "--yes"), "409", "experiment")
    refused(c.det("workspace", "delete", "Uncategorized", "--yes"), "409", "default")
    refused(c.det("project", "archive", "Uncategorized", "Uncategorized"), "409")
    # det e move ID WS PROJECT: its owner may, another user may not (403)
    refused(bob.det("e", "move", str(by_id), "Uncategorized", "Uncategorized"), "403")
    assert "Moved experiment" in ok(ann.det("e", "move", str(by_id), "Uncategorized",
                                            "Uncategorized"))
    refused(ann.det("e", "move", str(by_id), "vision", "no-such"), "project_name")
    # an archived project takes no experiments; only its owner or an admin archives it
    refused(bob.det("project", "archive", "vision", "cifar"), "403", "bob")
    ok(ann.det("project", "archive", "vision", "cifar"))
    r = paused(c, ann.token, config={"workspace": "vision", "project": "cifar"})
    assert r.status_code == 409 and "archived" in r.json()["detail"]
    refused(ann.det("e", "move", str(by_id), "vision", "cifar"), "409", "archived")
    ok(ann.det("project", "unarchive", "vision", "cifar"))
    # an archived workspace takes no new projects
    ok(c.det("workspace", "archive", "vision"))
    refused(ann.det("project", "create", "vision", "more"), "409", "archived")
    assert c.det_json("workspace", "describe", "vision")["archived"] is True
    ok(ann.det("workspace", "unarchive", "vision"))
    # emptied, a project and then its workspace are deleted
    ok(ann.det("e", "move", str(by_config), "Uncategorized", "Uncategorized"))
    ok(ann.det("project", "delete", "vision", "mnist", "--yes"))
    refused(bob.det("workspace", "delete", "vision", "--yes"), "403")
    ok(ann.det("workspace", "delete", "vision", "--yes"))
    assert [w["name"] for w in c.det_json("workspace", "list")] == ["Uncategorized"]
    assert {e["project_name"] for e in c.det_json("e", "list", "--all")} == {"Uncategorized"}


def test_the_python_client_makes_workspaces_and_files_experiments(
        c: Cluster, people: dict[str, Person]) -> None:
    from det_sdk.client import MasterError
    from det_sdk.experimental.client import Determined

    bob = Determined(c.url, user="bob", password=PASSWORDS["bob"])
    ws = bob.create_workspace("audio")
    assert bob.get_workspace("audio").id == ws.id
    assert "audio" in {w.name for w in bob.list_workspaces()}
    speech = ws.create_project("speech", description="asr")
    assert (speech.workspace_id, speech.description) == (ws.id, "asr")
    assert [p.name for p in ws.list_projects()] == ["speech"]
    exp = bob.create_experiment(config(c.root / "control", name="client-filed"),
                                str(TRIAL_DIR), project_id=speech.id)
    exp.pause()
    assert [e.id for e in bob.list_experiments(project_id=speech.id)] == [exp.id]
    assert exp.id not in {e.id for e in bob.list_experiments(project_id=1)}
    speech.reload()
    assert speech.n_experiments == 1
    with pytest.raises(MasterError, match="409"):
        ws.delete_project("speech")  # it holds an experiment
    with pytest.raises(MasterError, match="404"):
        bob.get_workspace("no-such-workspace")
    exp.kill()
    ok(c.det("e", "move", str(exp.id), "Uncategorized", "Uncategorized"))
    ws.delete_project("speech")
    bob.delete_workspace("audio")
    assert "audio" not in {w.name for w in bob.list_workspaces()}


def test_an_old_database_files_its_experiments_under_uncategorized(tmp_path: Path) -> None:
    import sqlite3

    from det_sdk.master.store import Store

    db = sqlite3.connect(tmp_path / "old.db")
    db.execute("CREATE TABLE experiments (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT,"
               " config TEXT NOT NULL, state TEXT NOT NULL, archive TEXT NOT NULL,"
               " created REAL NOT NULL, ended REAL)")
    db.execute("INSERT INTO experiments (name, config, state, archive, created)"
               " VALUES ('old', '{}', 'COMPLETED', 'a', 0)")
    db.commit()
    db.close()
    store = Store(tmp_path / "old.db")
    assert store.experiment_project(1) == 1
    assert store.project(1)["num_experiments"] == 1  # type: ignore[index]
    assert store.workspace(1)["name"] == "Uncategorized"  # type: ignore[index]


def test_the_web_ui_lists_and_filters_experiments_by_workspace_and_project(
        c: Cluster, people: dict[str, Person]) -> None:
    from harness.browser import missing_reason, open_browser, signed_in_context

    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    ann = people["ann"]
    ok(ann.det("workspace", "create", "nlp"))
    ok(ann.det("project", "create", "nlp", "bert"))
    r = paused(c, ann.token, config={"name": "in-bert", "workspace": "nlp",
                                     "project": "bert"})
    assert r.status_code == 201, r.text
    in_bert = r.json()["id"]
    elsewhere = paused(c, ann.token, config={"name": "in-uncategorized"}).json()["id"]
    with open_browser() as browser:
        context = signed_in_context(browser, c.url, ann.token)
        page = context.new_page()
        page.goto(f"{c.url}/ui/#/experiments")
        page.wait_for_selector(f'tr[data-id="{in_bert}"]', timeout=60_000)
        row = page.locator(f'tr[data-id="{in_bert}"]')
        assert row.locator("td.workspace").text_content() == "nlp"
        assert row.locator("td.project").text_content() == "bert"
        assert page.locator(f'tr[data-id="{elsewhere}"]').count() == 1
        page.select_option("#exp-workspace", "nlp")
        page.wait_for_selector(f'tr[data-id="{elsewhere}"]', state="detached",
                               timeout=30_000)
        assert page.locator(f'tr[data-id="{in_bert}"]').count() == 1
        page.select_option("#exp-project", "nlp/bert")
        assert page.locator("#experiments tbody tr").count() == 1
        page.select_option("#exp-workspace", "")
        page.wait_for_selector(f'tr[data-id="{elsewhere}"]', timeout=30_000)
        context.close()
