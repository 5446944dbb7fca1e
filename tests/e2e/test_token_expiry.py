"""User tokens expire (issue 59's leftovers): a real master started by the real
`det master up --token-lifetime 20s`, users signed in through the API, the web UI's form
and the real `det` CLI. Past the lifetime their tokens answer 401 saying the session
expired and how to sign in again, the CLI exits non-zero with that, the UI's session
ends with its token; the master's own token (`det master up`'s) and a running trial's
task token keep working.

The lifetime is short so that one wait covers every check; the checks made while the
tokens are fresh go over HTTP right after sign-in (milliseconds), well inside it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from harness.master import DET, Cluster, running_cluster, wait_until
from tests.lifecycle_harness import Fakes

pytestmark = pytest.mark.stack_neutral

LIFETIME = 20.0
PASSWORD = "ann-first-password"


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("expiry"),
                         options=["--slots", "2", "--token-lifetime", "20s"]) as cluster:
        yield cluster


def _ann_det(c: Cluster, *args: str, token: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    """`det ARGS` as ann at her own terminal (her HOME; ``token``: DET_USER_TOKEN)."""
    home = c.root / "home-ann"
    home.mkdir(exist_ok=True)
    env = {**c.env, "HOME": str(home), "DET_PASS": PASSWORD}
    if token is not None:
        env["DET_USER_TOKEN"] = token
    return subprocess.run([str(DET), *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=c.root)


def test_bad_lifetime_is_refused_naming_the_option(c: Cluster) -> None:
    out = c.det("master", "up", "--data-dir", str(c.root / "other"), "--token-lifetime",
                "soon")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--token-lifetime" in out.stderr and "'soon'" in out.stderr, out.stderr
    assert not (c.root / "other").exists()  # nothing started, nothing written


def test_tokens_and_ui_sessions_end_after_their_lifetime(c: Cluster) -> None:
    assert c.det("user", "create", "ann", "--password", PASSWORD).returncode == 0
    fakes = Fakes(c, c.root / "control")
    # a trial runs: its task token is no user session and must outlive the lifetime
    _, trial_id, _ = fakes.start_trial()
    signed_in = time.time()
    with httpx.Client(base_url=c.url, timeout=30) as anon:
        r = anon.post("/api/v1/auth/login", json={"username": "ann", "password": PASSWORD})
        assert r.status_code == 200, r.text
        token = r.json()["token"]
    browser = httpx.Client(base_url=c.url, timeout=30)
    r = browser.post("/ui/signin", data={"username": "ann", "password": PASSWORD})
    assert r.status_code == 303, r.text
    # the cookie lasts as long as the token it stands for
    assert "max-age=20;" in r.headers["set-cookie"].lower(), r.headers["set-cookie"]
    with c.http(token=token) as http:
        assert http.get("/api/v1/me").json()["user"]["username"] == "ann"
    assert browser.get("/ui/api/experiments").status_code == 200
    assert time.time() - signed_in < LIFETIME  # the fresh checks were made fresh

    with c.http(token=token) as http:
        def refused() -> httpx.Response | None:
            r = http.get("/api/v1/me")
            return r if r.status_code == 401 else None

        expired = wait_until("ann's token to expire", refused, timeout=LIFETIME + 90,
                             every=0.5)
        assert time.time() - signed_in >= LIFETIME - 1  # not before its time
        detail = expired.json()["detail"]
        assert "expired" in detail and "det user login ann" in detail, detail
        # outside /api/ too: the Prometheus scrape says so
        r = http.get("/prom/det-state-metrics")
        assert r.status_code == 401 and "expired" in r.json()["detail"], r.text
    # the web UI's session ended with its token: its data calls are refused
    assert browser.get("/ui/api/experiments").status_code == 401
    assert browser.get("/ui/", follow_redirects=False).headers["location"] == "/ui/signin"
    browser.close()

    # the CLI exits non-zero with the master's message
    out = _ann_det(c, "e", "list", token=token)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "expired" in out.stderr and "det user login ann" in out.stderr, out.stderr
    # the master's own token is no session: the first admin's `det` keeps working
    who = c.det("user", "whoami")
    assert who.returncode == 0 and "determined" in who.stdout, who.stdout + who.stderr
    # and the running trial still reports with its task token
    assert fakes.send(trial_id, "report")["steps"] == 1
    # signing in again gives a fresh token
    out = _ann_det(c, "user", "login", "ann")
    assert out.returncode == 0, out.stdout + out.stderr
    saved = json.loads((c.root / "home-ann" / ".det" / "credentials.json").read_text())
    assert saved[c.url] != token
    with c.http(token=saved[c.url]) as http:  # checked at once: it is 20 s young at most
        assert http.get("/api/v1/me").json()["user"]["username"] == "ann"
