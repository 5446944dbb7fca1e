"""Tokens on a team's master (issue 59's leftovers), through the real `det` CLI against one
real master: a password change ends the user's tokens and web UI sessions (the CLI that
changed its own signs in again; an admin's change of another's signs that user out), and
the Prometheus scrape counts only what its caller may see.
Token expiry has its own master (tests/e2e/test_token_expiry.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.master import DET, Cluster, running_cluster
from tests.lifecycle_harness import Fakes, config

pytestmark = pytest.mark.stack_neutral


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("tokens")) as cluster:
        yield cluster


def det_as(c: Cluster, name: str, *args: str, password: str
           ) -> subprocess.CompletedProcess[str]:
    """`det ARGS` at ``name``'s own terminal (their HOME and saved token), with
    ``password`` as DET_PASS (what login and change-password read without a terminal)."""
    home = c.root / f"home-{name}"
    home.mkdir(exist_ok=True)
    env = {**c.env, "HOME": str(home), "DET_PASS": password}
    return subprocess.run([str(DET), *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=c.root)


def saved_token(c: Cluster, name: str) -> str:
    home = c.root / ("home" if name == "determined" else f"home-{name}")
    return str(json.loads((home / ".det" / "credentials.json").read_text())[c.url])


def ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def me(c: Cluster, token: str) -> httpx.Response:
    with c.http(token=token) as http:
        return http.get("/api/v1/me")


def sign_in(c: Cluster, name: str, password: str) -> httpx.Response:
    with httpx.Client(base_url=c.url, timeout=30) as anon:
        return anon.post("/api/v1/auth/login", json={"username": name, "password": password})


def ui_session(c: Cluster, name: str, password: str) -> httpx.Client:
    browser = httpx.Client(base_url=c.url, timeout=30)
    r = browser.post("/ui/signin", data={"username": name, "password": password})
    assert r.status_code == 303 and "det_session" in browser.cookies, r.text
    # by default the cookie lasts Determined's 7 days, as the token behind it
    assert "max-age=604800;" in r.headers["set-cookie"].lower(), r.headers["set-cookie"]
    assert browser.get("/ui/api/experiments").status_code == 200
    return browser


def test_changing_ones_own_password_ends_every_token_but_the_cli_signs_in_again(
        c: Cluster) -> None:
    ok(c.det("user", "create", "ann", "--password", "ann-first-password"))
    elsewhere = sign_in(c, "ann", "ann-first-password").json()["token"]  # another machine
    browser = ui_session(c, "ann", "ann-first-password")
    ok(det_as(c, "ann", "user", "login", "ann", password="ann-first-password"))
    before = saved_token(c, "ann")
    assert me(c, before).status_code == 200 and me(c, elsewhere).status_code == 200

    ok(det_as(c, "ann", "user", "change-password", password="ann-second-password"))
    # every token of ann's from before is over, the web UI's session with them
    for token in (elsewhere, before):
        assert me(c, token).status_code == 401
    assert browser.get("/ui/api/experiments").status_code == 401
    browser.close()
    # ... but the terminal that changed it signed in again with the new password
    assert saved_token(c, "ann") != before
    assert "'ann'" in ok(det_as(c, "ann", "user", "whoami", password=""))
    assert sign_in(c, "ann", "ann-first-password").status_code == 401
    assert sign_in(c, "ann", "ann-second-password").status_code == 200


def test_an_admin_changing_a_password_signs_that_user_out_and_only_them(c: Cluster) -> None:
    ok(c.det("user", "create", "bob", "--password", "bob-first-password"))
    ok(det_as(c, "bob", "user", "login", "bob", password="bob-first-password"))
    admins = saved_token(c, "determined")
    bobs = saved_token(c, "bob")
    env = {**c.env, "DET_PASS": "bob-second-password"}
    ok(subprocess.run([str(DET), "user", "change-password", "bob"], env=env,
                      capture_output=True, text=True, timeout=120, cwd=c.root))
    out = det_as(c, "bob", "user", "whoami", password="")
    assert out.returncode == 1 and "refuses the saved token" in out.stderr, out.stderr
    assert me(c, bobs).status_code == 401
    # the admin's own sign-in is untouched (not signed in again either: not their password)
    assert saved_token(c, "determined") == admins
    assert me(c, admins).json()["user"]["username"] == "determined"
    ok(det_as(c, "bob", "user", "login", "bob", password="bob-second-password"))
    # (deactivation ends a user's tokens for good: test_users.py's own test, kept)


def scrape(c: Cluster, token: str) -> tuple[float, float]:
    """(experiments, trials) the scrape with ``token`` counts, every state summed."""
    with c.http(token=token) as http:
        r = http.get("/prom/det-state-metrics")
    assert r.status_code == 200, r.text
    totals = {"det_experiments": 0.0, "det_trials": 0.0}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.name in totals:
                totals[s.name] += s.value
    return totals["det_experiments"], totals["det_trials"]


def test_the_prometheus_scrape_counts_only_what_its_caller_may_see(c: Cluster) -> None:
    ok(c.det("user", "create", "cat", "--password", "cat-first-password"))
    ok(c.det("user", "create", "dan", "--password", "dan-first-password"))
    cat = sign_in(c, "cat", "cat-first-password").json()["token"]
    dan = sign_in(c, "dan", "dan-first-password").json()["token"]
    ok(c.det("workspace", "create", "secret"))
    project = c.det_json("project", "create", "secret", "plans")["id"]
    # a role on "secret" makes it dan's and the admins' only: cat may not see it
    ok(c.det("rbac", "assign-role", "Viewer", "-u", "dan", "-w", "secret"))
    before = scrape(c, cat)
    fakes = Fakes(c, c.root / "control")
    body: dict[str, Any] = {"config": config(c.root / "control", name="hidden"),
                            "model_definition": fakes.archive, "activate": False,
                            "project_id": project}
    with c.http() as http:
        r = http.post("/api/v1/experiments", json=body)
        assert r.status_code == 201, r.text
        trials = len(http.get(f"/api/v1/experiments/{r.json()['id']}").json()["trials"])
    assert trials >= 1
    admin = scrape(c, c.token)
    assert scrape(c, cat) == before  # nothing of the hidden workspace is counted for cat
    assert scrape(c, dan) == admin  # dan, a Viewer there, counts it as an admin does
    assert admin[0] - before[0] == 1 and admin[1] - before[1] == trials
    # cat's lists agree with cat's count
    with c.http(token=cat) as http:
        assert http.get(f"/api/v1/experiments/{r.json()['id']}").status_code == 404


def test_deleting_user_token_and_restarting_replaces_the_masters_own_token(
        c: Cluster) -> None:
    old = c.token
    c.down()
    (c.data_dir / "user.token").unlink()
    c.up()
    assert c.token != old  # `det master up` saved the new one for the CLI
    assert me(c, old).status_code == 401
    assert me(c, c.token).json()["user"]["username"] == "determined"
    assert "determined" in ok(c.det("user", "whoami"))
