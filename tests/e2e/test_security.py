"""Attacks and limits (issue 11: S1, S3, S4, S5, S6, S8) against a real master.

Tokens of real trial processes (``tests/lifecycle_trial``), raw sockets for bodies a
well-behaved client would never send, and the OpenAPI document the master serves.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path

import httpx
import pytest

from harness.master import Cluster, running_cluster
from tests.lifecycle_harness import Fakes

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral


def _finish(fakes: Fakes, exp_id: int, trial_id: int) -> None:
    fakes.send(trial_id, "finish")
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")


REPORT = {"group": "training", "steps_completed": 1, "metrics": {"loss": 1.0}}


def test_a_task_token_acts_on_its_own_trial_only_and_ends_with_its_process(
        fakes: Fakes) -> None:
    """S5: the token of a running task works; once its process has exited, nothing does."""
    exp_id, trial_id, _proc = fakes.start_trial()
    token = fakes.running_allocation(trial_id)["token"]
    with fakes.cluster.http(token=token) as task:
        assert task.post(f"/api/v1/trials/{trial_id}/metrics", json=REPORT).status_code == 204
        assert task.post(f"/api/v1/trials/{trial_id + 1000}/metrics",
                         json=REPORT).status_code == 403
        assert task.get("/api/v1/experiments").status_code == 403  # user-only
        assert task.get(f"/api/v1/trials/{trial_id}").status_code == 200
    _finish(fakes, exp_id, trial_id)
    with fakes.cluster.http(token=token) as task:
        for r in (task.post(f"/api/v1/trials/{trial_id}/metrics", json=REPORT),
                  task.post(f"/api/v1/trials/{trial_id}/progress", json={"progress": 0.5}),
                  task.get(f"/api/v1/trials/{trial_id}")):
            assert r.status_code == 401 and "ended" in r.json()["detail"]


def test_a_checkpoint_uuid_belongs_to_the_trial_that_first_registered_it(
        fakes: Fakes) -> None:
    """S1: another trial's uuid is refused (409); the owner's record and files stay."""
    exp_a, trial_a, _ = fakes.start_trial()
    exp_b, trial_b, _ = fakes.start_trial()
    uuid = fakes.send(trial_a, "checkpoint")["uuid"]
    token_b = fakes.running_allocation(trial_b)["token"]
    steal = {"uuid": uuid, "trial_id": trial_b, "steps_completed": 99, "epoch": 9}
    with fakes.cluster.http(token=token_b) as b:
        r = b.post("/api/v1/checkpoints", json=steal)
    assert r.status_code == 409 and f"belongs to trial {trial_a}" in r.json()["detail"]
    with fakes.http() as http:
        info = http.get(f"/api/v1/checkpoints/{uuid}").json()
        assert (info["trial_id"], info["steps_completed"]) == (trial_a, 0)
        # the user cannot move it either; a repeated report by the owner is fine
        assert http.post("/api/v1/checkpoints", json=steal).status_code == 409
        again = {**steal, "trial_id": trial_a, "steps_completed": 0, "epoch": 0}
        assert http.post("/api/v1/checkpoints", json=again).status_code == 204
    assert Path(info["path"]).is_dir()
    assert fakes.trial_of(exp_a)["latest_checkpoint"] == uuid
    for exp_id, trial_id in ((exp_a, trial_a), (exp_b, trial_b)):
        _finish(fakes, exp_id, trial_id)
    assert Path(info["path"]).is_dir()  # kept by trial a's retention


def _raw(cluster: Cluster, request: bytes, body_chunks: int = 0) -> tuple[int, float]:
    """Send raw bytes; the answer's status and how long it took."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as s:
        s.sendall(request)
        for _ in range(body_chunks):
            try:
                s.sendall(b"100000\r\n" + b"x" * 0x100000 + b"\r\n")
            except OSError:
                break  # the master answered and closed: fine
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split()[1]), time.perf_counter() - t0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_bodies_are_limited_before_they_are_read_and_authentication_comes_first(
        fakes: Fakes) -> None:
    """S3: an anonymous 200 MB POST is answered 401 at once; an authenticated one over
    the route's limit 413, with a Content-Length or without (chunked)."""
    cluster = fakes.cluster
    pid = int((cluster.data_dir / "master.pid").read_text())
    before = _rss_mb(pid)
    status, took = _raw(cluster, b"POST /api/v1/experiments HTTP/1.1\r\nHost: x\r\n"
                                 b"Content-Type: application/json\r\n"
                                 b"Content-Length: 200000000\r\n\r\n")
    assert status == 401 and took < 5
    auth = f"Authorization: Bearer {cluster.token}\r\n".encode()
    status, _ = _raw(cluster, b"POST /api/v1/experiments HTTP/1.1\r\nHost: x\r\n" + auth +
                     b"Content-Type: application/json\r\nContent-Length: 200000000\r\n\r\n")
    assert status == 413
    status, _ = _raw(cluster, b"POST /api/v1/trials/1/metrics HTTP/1.1\r\nHost: x\r\n" + auth +
                     b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                     body_chunks=3)
    assert status == 413
    assert _rss_mb(pid) - before < 50
    with fakes.http() as http:
        assert http.get("/health").status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("GET", f"/api/v1/experiments/{2**64}", None, "exp_id"),
        ("GET", f"/api/v1/trials/{2**63}/metrics", None, "trial_id"),
        ("GET", f"/api/v1/checkpoints?trial_id={2**70}", None, "trial_id"),
        ("GET", f"/api/v1/trials/1/logs?offset={2**64}", None, "offset"),
        ("POST", "/api/v1/trials/1/metrics",
         {"group": "training", "steps_completed": 2**64, "metrics": {}}, "steps_completed"),
        ("POST", "/api/v1/checkpoints",
         {"uuid": "u", "trial_id": 2**64, "steps_completed": 0, "epoch": 0}, "trial_id"),
        ("POST", "/api/v1/trials/1/progress", {"progress": False}, "progress"),
        ("POST", "/api/v1/trials/1/searcher/completed_operation",
         {"unit": "batches", "length": 1, "searcher_metric": False}, "searcher_metric"),
    ],
)
def test_out_of_range_numbers_get_400_naming_the_field(fakes: Fakes, method: str, path: str,
                                                       body: object, field: str) -> None:
    """S4 and S8: no 500; the answer names the field."""
    with fakes.http() as http:
        r = http.request(method, path, json=body)
    assert r.status_code == 400, r.text
    assert field in json.dumps(r.json()["detail"])


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"searcher": {"name": "single", "max_length": {"epochs": 1e30}}},
         "searcher.max_length.epochs"),
        ({"searcher": {"name": "single", "max_length": {"epochs": True}}},
         "searcher.max_length.epochs"),
        ({"hyperparameters": {"lr": {"type": "log", "minval": 1000, "maxval": 1001}},
          "searcher": {"name": "random", "max_trials": 1}}, "hyperparameters.lr"),
        ({"hyperparameters": {"lr": {"type": "double", "minval": "-Infinity", "maxval": 1}},
          "searcher": {"name": "random", "max_trials": 1}}, "hyperparameters.lr.minval"),
        ({"searcher": {"name": "adaptive_asha", "max_length": {"epochs": 4}, "max_trials": 2,
                       "num_rungs": 1_000_000_000}}, "searcher.num_rungs"),
        ({"searcher": {"name": "random", "max_trials": 100_000}}, "searcher.max_trials"),
        ({"hyperparameters": {"a": {"type": "int", "minval": 0, "maxval": 10**9,
                                    "count": 10_000},
                              "b": {"type": "double", "minval": 0, "maxval": 1,
                                    "count": 10_000}},
          "searcher": {"name": "grid"}}, "grid search would create 100000000 trials"),
        ({"max_restarts": 2**70}, "max_restarts"),
    ],
)
def test_configs_out_of_bounds_are_refused_quickly_and_leave_no_upload(
        fakes: Fakes, overrides: dict, field: str) -> None:
    """S2 and S4: bounds checked before anything is built; no orphan upload."""
    from tests.lifecycle_harness import config

    uploads = fakes.cluster.data_dir / "uploads" / "experiments"
    before = sorted(uploads.iterdir()) if uploads.exists() else []
    t0 = time.perf_counter()
    with fakes.http() as http:
        r = http.post("/api/v1/experiments", json={
            "config": config(fakes.control, **overrides), "model_definition": fakes.archive})
    assert r.status_code == 400, r.text
    assert field in r.json()["detail"]
    assert time.perf_counter() - t0 < 2
    assert (sorted(uploads.iterdir()) if uploads.exists() else []) == before


def test_the_data_directory_is_private_and_tasks_get_no_user_token(tmp_path: Path) -> None:
    """S6: data directory 0700, database and token files 0600, the database keeps no
    usable user token, and a task never inherits DET_USER_TOKEN."""
    c = Cluster(tmp_path)
    c.env["DET_USER_TOKEN"] = "a-user-token-of-the-shell"  # as if exported where it started
    out = c.det("master", "up", "--data-dir", str(c.data_dir), "--port", str(c.port),
                "--slots", "1")
    assert out.returncode == 0, out.stderr
    c.env.pop("DET_USER_TOKEN")
    try:
        fakes = Fakes(c, tmp_path / "control")
        exp_id = fakes.create()
        trial_id = fakes.trial_of(exp_id)["id"]
        fakes.wait_started(trial_id)
        answer = fakes.send(trial_id, "env")
        assert "DET_USER_TOKEN" not in answer["env"] and "DET_SESSION_TOKEN" in answer["env"]
        assert answer["umask"] != 0o077  # tasks get the user's umask, not the master's
        assert stat.S_IMODE(os.stat(c.data_dir).st_mode) == 0o700
        # the log and the pid file too (issue 22: they were 0644, made by `det master up`)
        for name in ("master.db", "master.db-wal", "user.token", "master.log", "master.pid",
                     "master.json"):
            assert stat.S_IMODE(os.stat(c.data_dir / name).st_mode) == 0o600, name
        db_bytes = b"".join((c.data_dir / n).read_bytes() for n in ("master.db",
                                                                    "master.db-wal"))
        assert c.token.encode() not in db_bytes
        fakes.send(trial_id, "finish")
        fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")
    finally:
        c.stop()


def test_openapi_documents_every_status_and_media_type(fakes: Fakes) -> None:
    """S8: the error statuses the master answers with, and the download's gzip."""
    with fakes.http() as http:
        doc = http.get("/openapi.json").json()
    pause = doc["paths"]["/api/v1/experiments/{exp_id}/pause"]["post"]["responses"]
    for status in ("400", "401", "404", "409"):
        assert status in pause, status
    download = doc["paths"]["/api/v1/checkpoints/{uuid}/download"]["get"]["responses"]
    assert "application/gzip" in download["200"]["content"] and "410" in download
    metric = doc["components"]["schemas"]["MetricsReport"]["properties"]["metrics"]
    assert "NaN" in json.dumps(metric)


def test_a_master_with_a_full_disk_answers_507(tmp_path: Path) -> None:
    """S7: a full data disk is a clear 507, not a bare 500 (a 1 MB tmpfs when it can be
    mounted here; skipped otherwise)."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        with running_cluster(mnt) as c:
            fakes = Fakes(c, tmp_path / "control")
            big = os.urandom(3_000_000)
            import base64
            import io
            import tarfile

            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                info = tarfile.TarInfo("blob")
                info.size = len(big)
                tar.addfile(info, io.BytesIO(big))
            from tests.lifecycle_harness import config

            with c.http() as http:
                r = http.post("/api/v1/experiments", json={
                    "config": config(fakes.control),
                    "model_definition": base64.b64encode(buf.getvalue()).decode()})
                assert r.status_code == 507, r.text
                assert "disk is full" in r.json()["detail"]
                assert http.get("/health").status_code == 200
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_log_offset_past_the_end_reads_nothing(fakes: Fakes) -> None:
    """Found by schemathesis: an offset beyond what the filesystem can seek gave 500."""
    exp_id, trial_id, _ = fakes.start_trial()
    with fakes.http() as http:
        r = http.get(f"/api/v1/trials/{trial_id}/logs", params={"offset": 2**53 - 1})
        assert r.status_code == 200 and r.json()["text"] == ""
        assert r.json()["offset"] < 2**53 - 1  # clamped to the log's size
    _finish(fakes, exp_id, trial_id)


def test_an_idle_master_with_the_largest_search_stays_idle(fakes: Fakes) -> None:
    """S2: 10,000 trials (the limit) queued behind max_concurrent_trials: the master's
    scheduler reads only what can start, so it idles; `det experiment list` answers."""
    cluster = fakes.cluster
    exp_id = fakes.create(hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 1}},
                          searcher={"name": "random", "metric": "loss", "max_trials": 10_000,
                                    "max_concurrent_trials": 1,
                                    "max_length": {"batches": 100}})
    first = fakes.experiment(exp_id)["trials"][0]["id"]
    fakes.wait_started(first)
    pid = int((cluster.data_dir / "master.pid").read_text())

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    c0, t0 = cpu(), time.time()
    time.sleep(5)
    share = (cpu() - c0) / (time.time() - t0)
    assert share < 0.2, f"the idle master used {share:.0%} of a core"
    t0 = time.perf_counter()
    out = cluster.det("experiment", "list")
    assert out.returncode == 0 and time.perf_counter() - t0 < 20
    fakes.command(exp_id, "kill")
    fakes.wait_state(exp_id, "CANCELED", "CANCELED")


# --- the web UI and the browser-facing answers (issue 22: 6, 7, 8, 10) --------------------

BROWSER_HEADERS = {"x-frame-options": "DENY", "x-content-type-options": "nosniff",
                   "referrer-policy": "no-referrer"}


def _log_size(cluster: Cluster) -> int:
    return (cluster.data_dir / "master.log").stat().st_size


def test_anonymous_requests_cannot_write_tracebacks_to_the_log(fakes: Fakes) -> None:
    """6: a static name over 255 bytes was a 500 with a 36 KB traceback per request. Bad
    static paths are 404s now; no anonymous request makes the master log a traceback."""
    cluster = fakes.cluster
    before = _log_size(cluster)
    anon = httpx.Client(base_url=cluster.url, timeout=30)
    for name in ("a" * 300, "a" * 5000, "a%00b", "%ff%fe", "..%2f..%2fapp.py", "pages",
                 "pages/", "%2e%2e/routes.py", "vendor/uplot/../../app.js/x", "a\\b",
                 "app.js%00.png", "x/" * 200):
        r = anon.get(f"/ui/static/{name}")
        assert r.status_code == 404, (name[:40], r.status_code)
    weird = [("GET", "/ui/signin?code=" + "%00" * 100), ("GET", "/ui/signin?code=" + "x" * 9000),
             ("POST", "/ui/signin"), ("POST", "/ui/signout"), ("GET", "/docs"),
             ("GET", "/openapi.json"), ("POST", "/ui/api/signin-codes"),
             ("GET", "/ui/api/experiments/1"), ("GET", "/ui/api/experiments/99999999999999999999"),
             ("GET", "/ui/" + "a" * 5000), ("GET", "/api/v1/experiments/" + "9" * 400)]
    for method, path in weird:
        for headers in ({}, {"cookie": "det_session=" + "A" * 43},
                        {"cookie": "det_session=\x7f%00\\x"}, {"authorization": "Bearer \x01"},
                        {"x-det-ui": "1", "cookie": b"det_session=" + "é".encode() * 30}):
            r = anon.request(method, path, headers=headers,
                             content=b"token=%ff%00&token=" + b"\xff" * 300)
            assert r.status_code < 500, (method, path[:40], headers, r.status_code)
    time.sleep(0.5)  # the log is written by the master's process
    log = (cluster.data_dir / "master.log").read_bytes()[before:]
    assert b"Traceback" not in log and len(log) < 2000, log[:2000]


def test_every_answer_carries_the_browser_headers(fakes: Fakes) -> None:
    """7, 10: frames refused (X-Frame-Options and CSP frame-ancestors), nosniff, no
    Referer, on pages, files, data, errors and the API's guard alike."""
    cluster = fakes.cluster
    anon = httpx.Client(base_url=cluster.url, timeout=30)
    answers = [anon.get("/health"), anon.get("/ui/"), anon.get("/ui/signin"),
               anon.get("/ui/static/app.js"), anon.get("/ui/static/nothing"),
               anon.get("/api/v1/experiments"), anon.delete("/health"), anon.get("/nowhere")]
    with fakes.http() as http:
        answers += [http.get("/api/v1/experiments"), http.get("/api/v1/experiments/x"),
                    http.get("/ui/api/experiments"), http.get("/ui/")]
    for r in answers:
        where = (r.request.method, r.request.url.path, r.status_code)
        for name, value in BROWSER_HEADERS.items():
            assert r.headers.get(name) == value, (where, name)
        csp = r.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, where
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, where


def test_openapi_and_docs_need_the_user_token(fakes: Fakes) -> None:
    """10: the API's description is the user's (a token, or the UI's session)."""
    cluster = fakes.cluster
    exp_id, trial_id, _ = fakes.start_trial()
    task = fakes.running_allocation(trial_id)["token"]
    for token in (None, task, "not-a-token"):
        with cluster.http(token=token) as client:
            for path in ("/openapi.json", "/docs"):
                assert client.get(path).status_code == 401, (path, token)
    with fakes.http() as http:
        assert "/api/v1/experiments" in http.get("/openapi.json").json()["paths"]
        docs = http.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        # its own policy: the Swagger CDN and its one inline script by hash, no frames
        csp = docs.headers["content-security-policy"]
        assert "'sha256-" in csp and "frame-ancestors 'none'" in csp
    session = httpx.Client(base_url=cluster.url, timeout=30)
    assert session.post("/ui/signin", data={"token": cluster.token}).status_code == 303
    assert session.get("/openapi.json").status_code == 200
    _finish(fakes, exp_id, trial_id)


def test_the_session_cookie_is_a_revocable_id_and_sign_out_needs_the_header(
        fakes: Fakes) -> None:
    """8: the cookie holds a random session id (not the token), HttpOnly, SameSite=Strict,
    Path=/, 7 days; sign-out without the UI's header does nothing; with it, the session
    ends on the master: the old cookie, replayed, is refused."""
    cluster = fakes.cluster
    browser = httpx.Client(base_url=cluster.url, timeout=30)
    signin = browser.post("/ui/signin", data={"token": cluster.token})
    assert signin.status_code == 303
    cookie = signin.headers["set-cookie"]
    sid = browser.cookies["det_session"]
    assert cluster.token not in cookie and len(sid) >= 40
    for part in ("HttpOnly", "SameSite=strict", "Path=/", "Max-Age=604800"):
        assert part.lower() in cookie.lower(), (part, cookie)
    assert browser.get("/ui/api/experiments").status_code == 200
    # a plain form of another origin: no X-Det-UI header
    refused = browser.post("/ui/signout", data={"x": "1"},
                           headers={"origin": "http://127.0.0.1:1"})
    assert refused.status_code == 403 and "x-det-ui" in refused.text.lower()
    assert browser.get("/ui/api/experiments").status_code == 200  # still signed in
    out = browser.post("/ui/signout", headers={"X-Det-UI": "1"})
    assert out.status_code == 204 and "det_session=" in out.headers["set-cookie"]
    replay = httpx.Client(base_url=cluster.url, timeout=30, cookies={"det_session": sid})
    assert replay.get("/ui/api/experiments").status_code == 401
    assert replay.get("/ui/").status_code == 303  # to the sign-in page
    # the token itself as a cookie (what the cookie used to be) is no session either
    as_token = httpx.Client(base_url=cluster.url, timeout=30,
                            cookies={"det_session": cluster.token})
    assert as_token.get("/ui/api/experiments").status_code == 401


def test_link_fields_accept_http_urls_only(fakes: Fakes) -> None:
    """10: a TensorBoard link is shown on the experiment's page: javascript: (or any
    scheme but http and https) is refused with the field named."""
    with fakes.http() as http:
        for url in ("javascript:alert(document.cookie)", "JavaScript:alert(1)",
                    " javascript:alert(1)", "data:text/html,<script>1</script>",
                    "//evil.example/", "http://", "http://host/\njavascript:x", 7):
            r = http.post("/ui/api/tensorboards", json={"url": url, "pid": os.getpid(),
                                                        "experiments": [1]})
            assert r.status_code == 400 and r.json()["detail"].startswith("url:"), (url, r.text)
        ok = http.post("/ui/api/tensorboards", json={"url": "http://127.0.0.1:6006/",
                                                     "pid": os.getpid(), "experiments": []})
        assert ok.status_code == 201
