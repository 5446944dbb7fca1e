"""The web UI as a person uses it: a real master, real experiments, pages in headless Chromium.

One master for the module (``cluster``). A small ASHA search (4 trials) runs to the
end first; its pages are checked against what the master's REST API says. A trial
without TensorFlow (tests/lifecycle_harness.py) is then paused, activated and killed
from the pages while its curves update live. ``det tensorboard start`` (the master) and
``det tensorboard run`` (the CLI's process) serve the trials' event files.

Set ``DET_UI_SCREENSHOTS=docs/ui`` to refresh the README's screenshots from this run.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import re
import sqlite3
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.browser import missing_reason, open_browser, signed_in_context
from harness.master import DET, Cluster, api, create, describe, wait_until
from tests.lifecycle_harness import Fakes

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral

SCREENSHOTS = os.environ.get("DET_UI_SCREENSHOTS")
HANDICAPS = [0.0, 0.3, 0.6, 0.9]  # the order of the trials' searcher metric, known in advance


def _shot(page: Any, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    with open_browser() as b:
        yield b


@pytest.fixture(scope="module")
def asha(cluster: Cluster) -> int:
    """A finished ASHA search over a handicap hyperparameter (4 trials, 2 at a time)."""
    config = cluster.write_config(
        "ui-asha",
        hyperparameters={"learning_rate": 0.05, "global_batch_size": 16,
                         "handicap": {"type": "categorical", "vals": HANDICAPS}},
        searcher={"name": "adaptive_asha", "metric": "val_handicapped_loss",
                  "max_length": {"epochs": 4}, "max_trials": 4, "divisor": 2, "num_rungs": 3,
                  "mode": "aggressive", "max_concurrent_trials": 2},
        reproducibility={"experiment_seed": 3})
    exp = create(cluster, config)
    wait_until("the ASHA search to finish",
               lambda: describe(cluster, exp)["state"] in ("COMPLETED", "ERROR"), timeout=400,
               every=1.0)
    info = describe(cluster, exp)
    assert info["state"] == "COMPLETED", [t.get("last_error") for t in info["trials"]]
    return exp


def _page(browser: Any, cluster: Cluster, hash_: str) -> Any:
    context = signed_in_context(browser, cluster.url, cluster.token)
    page = context.new_page()
    page.on("dialog", lambda d: d.accept())  # the confirmations of pause/activate/kill
    page.goto(f"{cluster.url}/ui/{hash_}")
    page.wait_for_function(f"document.body.dataset.ready === {hash_!r}")
    return page


# --- sign-in ------------------------------------------------------------------------------


def test_sign_in_by_link_once_by_pasted_token_never_by_task_token(cluster: Cluster,
                                                                  asha: int) -> None:
    anon = httpx.Client(base_url=cluster.url, timeout=30)
    assert anon.get("/ui/").status_code == 303  # to the sign-in page
    assert anon.get("/ui/api/experiments").status_code == 401
    assert anon.get("/ui/signin").status_code == 200

    out = cluster.det("ui")
    assert out.returncode == 0, out.stderr
    link = re.search(r"(http://\S+/ui/signin\?code=\S+)", out.stdout).group(1)
    first = anon.get(link)
    assert first.status_code == 303 and first.headers["location"] == "/ui/"
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert anon.get("/ui/api/experiments").status_code == 200  # the client kept the cookie
    assert httpx.get(link, timeout=30).status_code == 401  # a link signs in once

    fresh = httpx.Client(base_url=cluster.url, timeout=30)
    task_token = _task_token(cluster, asha)
    refused = fresh.post("/ui/signin", data={"token": task_token})
    assert refused.status_code == 403 and "task" in refused.text
    assert fresh.get("/ui/api/experiments").status_code == 401
    ok = fresh.post("/ui/signin", data={"token": cluster.token})
    assert ok.status_code == 303
    assert asha in [e["id"] for e in fresh.get("/ui/api/experiments").json()["experiments"]]
    # state changes need the UI's header (or a bearer token): no cross-site form posts
    assert fresh.post(f"/ui/api/experiments/{asha}/pause").status_code == 403
    # a task token is no user for the UI's data either
    assert httpx.get(f"{cluster.url}/ui/api/experiments", timeout=30,
                     headers={"Authorization": f"Bearer {task_token}"}).status_code == 401


def _task_token(cluster: Cluster, exp_id: int) -> str:
    trial = describe(cluster, exp_id)["trials"][0]["id"]
    db = sqlite3.connect(cluster.data_dir / "master.db")
    (token,) = db.execute("SELECT token FROM allocations WHERE trial_id = ?", (trial,)).fetchone()
    return token


def test_sign_in_page_accepts_a_pasted_token(browser: Any, cluster: Cluster, asha: int) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{cluster.url}/ui/")
    assert page.url.endswith("/ui/signin")
    page.fill("#token", "not-a-token")
    page.click("#signin")
    assert "Unknown token" in page.text_content("#signin-error")
    page.fill("#token", cluster.token)
    page.click("#signin")
    page.wait_for_selector(f"#experiments tbody tr[data-id='{asha}']")
    assert not any(c["name"] == "det_session" and not c["httpOnly"] for c in context.cookies())
    assert page.evaluate("document.cookie") == ""  # HttpOnly: page scripts never see it
    context.close()


# --- another origin (issue 22: 7, 8) ------------------------------------------------------------


@contextlib.contextmanager
def _other_origin(html: str) -> Iterator[str]:
    """A page served from another port of 127.0.0.1: another origin, but the same *site*
    for cookies, so SameSite=Strict alone does not keep the UI's cookie from it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_another_origin_cannot_frame_the_ui(browser: Any, cluster: Cluster) -> None:
    """7: a page on another port framed the signed-in UI, and a click in the frame killed
    an experiment. Now the frame shows nothing (CSP frame-ancestors, X-Frame-Options)."""
    from playwright.sync_api import Error as PlaywrightError

    context = signed_in_context(browser, cluster.url, cluster.token, enforce_csp=True)
    page = context.new_page()
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "frame" in m.text else None)
    frame_html = (f'<iframe id="ui" src="{cluster.url}/ui/#/experiments" width="800" '
                  'height="600"></iframe>')
    with _other_origin(frame_html) as url:
        page.goto(url, wait_until="load")
        page.wait_for_timeout(500)
        framed = [f for f in page.frames if f != page.main_frame]
        assert framed, "the page has its iframe"
        for frame in framed:
            # nothing of the UI rendered inside: not its shell, not its data
            try:
                rendered = frame.evaluate("document.querySelector('#app') !== null")
            except PlaywrightError:  # a blocked frame's error page may not evaluate at all
                rendered = False
            assert not rendered, frame.url
        assert any("frame-ancestors" in text or "X-Frame-Options" in text
                   for text in refused), refused
    # the same context, at the UI's own origin: signed in, the page renders
    page.goto(f"{cluster.url}/ui/#/experiments")
    page.wait_for_selector("body[data-ready='#/experiments']")
    context.close()


def test_sign_out_ends_the_session_and_another_origins_form_cannot(browser: Any,
                                                                  cluster: Cluster) -> None:
    """8: a plain form POST from another origin signed the browser out; now it is refused
    (no X-Det-UI header) and the session lives on. The page's own Sign out ends the
    session on the master: the old cookie, replayed, is refused."""
    context = signed_in_context(browser, cluster.url, cluster.token, enforce_csp=True)
    page = context.new_page()
    form = (f'<form id="f" method="post" action="{cluster.url}/ui/signout"></form>'
            '<script>document.getElementById("f").submit()</script>')
    with _other_origin(form) as url:
        with page.expect_navigation(url=re.compile(re.escape(cluster.url))):
            page.goto(url)
        assert "X-Det-UI" in page.content() or "x-det-ui" in page.content()
    page.goto(f"{cluster.url}/ui/#/experiments")
    page.wait_for_selector("body[data-ready='#/experiments']")  # still signed in
    sid = next(c["value"] for c in context.cookies() if c["name"] == "det_session")
    page.click("#signout button")
    page.wait_for_url(f"{cluster.url}/ui/signin")
    assert not [c for c in context.cookies() if c["name"] == "det_session"]
    replay = httpx.Client(base_url=cluster.url, timeout=30, cookies={"det_session": sid})
    assert replay.get("/ui/api/experiments").status_code == 401
    context.close()


def test_pages_render_under_the_content_security_policy(browser: Any, cluster: Cluster,
                                                        asha: int) -> None:
    """7: the policy is strict (no inline script or style) and the pages break none of
    it: every page, charts included, renders with no violation reported."""
    trial = describe(cluster, asha)["trials"][0]["id"]
    context = signed_in_context(browser, cluster.url, cluster.token, enforce_csp=True)
    context.add_init_script("""window.__csp = [];
        document.addEventListener('securitypolicyviolation',
            (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));""")
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    first = page.goto(f"{cluster.url}/ui/#/experiments")
    assert "frame-ancestors 'none'" in first.headers["content-security-policy"]
    for hash_, ready in ((f"#/experiments/{asha}", "#parcoords[data-lines]"),
                         (f"#/trials/{trial}", "#charts canvas"), ("#/jobs", "h1")):
        page.goto(f"{cluster.url}/ui/{hash_}")
        try:
            page.wait_for_selector(f"body[data-ready='{hash_}']")  # (wait_for_function: eval)
            page.wait_for_selector(ready)
        except Exception as err:
            raise AssertionError((hash_, errors, page.evaluate("window.__csp"),
                                  page.inner_html("#app")[:2000])) from err
        assert page.evaluate("window.__csp") == [], (hash_, page.evaluate("window.__csp"))
    page.goto(f"{cluster.url}/ui/#/experiments")
    page.wait_for_selector("body[data-ready='#/experiments']")
    assert page.locator("progress.progress").count() >= 1  # drawn with no inline style
    assert page.evaluate("window.__csp") == []
    signin = context.new_page()
    signin.goto(f"{cluster.url}/ui/signin")
    assert signin.evaluate("window.__csp") == []
    assert not [e for e in errors if "Content Security Policy" in e], errors
    context.close()


# --- pages of a finished search -----------------------------------------------------------------


def test_experiment_list_shows_state_progress_searcher_best_trials(browser: Any,
                                                                    cluster: Cluster,
                                                                    asha: int) -> None:
    info = describe(cluster, asha)
    page = _page(browser, cluster, "#/experiments")
    row = page.locator(f"#experiments tbody tr[data-id='{asha}']")
    cells = row.locator("td").all_text_contents()
    assert cells[0] == str(asha) and cells[1] == "ui-asha"
    assert "COMPLETED" in cells[2]
    assert "100%" in cells[3]
    assert cells[4] == "adaptive_asha"
    best = min(t["best_metric"] for t in info["trials"])
    assert cells[5].split()[0] == f"{best:.4g}" and "val_handicapped_loss" in cells[5]
    assert cells[6] == "4"
    assert row.locator("button").count() == 0  # nothing to pause or kill when done
    page.fill("#exp-filter", "no-such-experiment")
    assert page.locator("#experiments tbody tr").count() == 0
    page.fill("#exp-filter", "asha")
    assert page.locator("#experiments tbody tr").count() == 1
    _shot(page, "experiments")
    page.context.close()


def test_experiment_page_trials_curves_and_hyperparameter_views(browser: Any, cluster: Cluster,
                                                                asha: int) -> None:
    info = describe(cluster, asha)
    trials = {t["id"]: t for t in info["trials"]}
    page = _page(browser, cluster, f"#/experiments/{asha}")
    rows = page.locator("#trials tbody tr")
    assert rows.count() == 4
    shown = {int(r.get_attribute("data-id")):
             float(r.locator("td[data-hp='handicap']").text_content()) for r in rows.all()}
    assert shown == {i: t["hparams"]["handicap"] for i, t in trials.items()}

    # sort by the handicap column, descending: the worst handicap first
    page.click("#trials th[data-key='hp.handicap']")
    page.click("#trials th[data-key='hp.handicap']")
    first = page.locator("#trials tbody tr").first
    assert float(first.locator("td[data-hp='handicap']").text_content()) == max(
        t["hparams"]["handicap"] for t in trials.values())

    # the searcher metric of every trial over epochs: one series per trial, a point per
    # validation, with ASHA's rungs (1, 2, 4 epochs) as lines
    curves = page.evaluate("""() => { const u = window.detCharts['curves'];
        return {series: u.series.length - 1, xs: u.data[0],
                points: u.data.slice(1).map(s => s.filter(v => v != null).length)}; }""")
    assert curves["series"] == 4
    validations = httpx.get(f"{cluster.url}/ui/api/experiments/{asha}/curves", timeout=30,
                            headers={"Authorization": f"Bearer {cluster.token}"}).json()
    assert sorted(curves["points"]) == sorted(len(t["value"]) for t in validations["trials"])
    assert max(curves["xs"]) == 4 and sum(curves["points"]) >= 4 + 2  # some were promoted
    assert page.evaluate("() => document.querySelector('#curves canvas') !== null")

    scatter = page.evaluate("window.detCharts['scatter-handicap']")
    assert len(scatter["points"]) == 4
    assert {(p["x"], round(p["y"], 6)) for p in scatter["points"]} == {
        (t["hparams"]["handicap"], round(t["best_metric"], 6)) for t in trials.values()}
    assert page.get_attribute("#parcoords", "data-lines") == "4"
    _shot(page, "experiment")
    page.context.close()


def test_trial_page_metrics_hparams_checkpoints_log(browser: Any, cluster: Cluster,
                                                   asha: int) -> None:
    info = describe(cluster, asha)
    best = min(info["trials"], key=lambda t: t["best_metric"])
    api = httpx.Client(base_url=cluster.url, timeout=30,
                       headers={"Authorization": f"Bearer {cluster.token}"})
    reports = api.get(f"/api/v1/trials/{best['id']}/metrics").json()
    page = _page(browser, cluster, f"#/trials/{best['id']}")

    charts = page.evaluate("""() => Object.fromEntries(Object.entries(window.detCharts)
        .filter(([k]) => k.startsWith('chart-'))
        .map(([k, u]) => [k, u.series.slice(1).map((s, i) =>
            [s.label, u.data[i + 1].filter(v => v != null).length])]))""")
    counts = {}
    for r in reports:
        for name in r["metrics"]:
            counts[f"{r['group']}: {name}"] = counts.get(f"{r['group']}: {name}", 0) + 1
    drawn = {label: n for series in charts.values() for label, n in series}
    assert drawn == counts  # every report of every metric is a point (nothing downsampled)
    assert {"chart-loss", "chart-accuracy"} <= set(charts)

    # switching the x axis to epochs: the last validation sits at the trial's last epoch
    page.check("input[name='xmode'][value='epochs']")
    xmax = page.evaluate("() => Math.max(...window.detCharts['chart-loss'].data[0])")
    assert xmax == pytest.approx(best["epoch"], rel=1e-6)

    assert page.text_content("td[data-hp='handicap']").strip() == f"{best['hparams']['handicap']}"
    # the Keras backend its checkpoints were trained on (the cluster model: TensorFlow's)
    assert page.text_content("#keras-backend") == best["keras_backend"] == "tensorflow"
    checkpoints = api.get(f"/api/v1/trials/{best['id']}/checkpoints").json()
    links = page.locator("#checkpoints a.download")
    assert links.count() == len(checkpoints) >= 1
    archive = page.request.get(cluster.url + links.first.get_attribute("href"))
    assert archive.ok
    with tarfile.open(fileobj=io.BytesIO(archive.body()), mode="r:gz") as tar:
        names = tar.getnames()
    assert any(n.endswith((".h5", ".json", ".npz", ".keras")) for n in names), names

    page.wait_for_function("document.querySelector('#log').textContent.includes('done')")
    assert "rank 0 done" in page.text_content("#log")
    _shot(page, "trial")
    page.context.close()


def test_long_series_is_downsampled_then_zoomed_and_shown_whole(browser: Any, cluster: Cluster,
                                                                 tmp_path: Path) -> None:
    # a trial that reports nothing, given 30,000 training points through the store (a real
    # trial would take an hour to report them): what the master keeps is what it serves
    (tmp_path / "quiet").mkdir()
    (tmp_path / "quiet" / "train.py").write_text("print('no metrics')\n")
    exp = create(cluster, cluster.write_config("ui-long"), tmp_path / "quiet")
    trial = describe(cluster, exp)["trials"][0]["id"]
    wait_until("the quiet trial to end", lambda: describe(cluster, exp)["state"] in (
        "COMPLETED", "ERROR"), timeout=120)
    n = 30_000
    db = sqlite3.connect(cluster.data_dir / "master.db", timeout=30)
    with db:
        db.executemany("INSERT INTO metrics VALUES (?, 'training', ?, 0, ?, ?)", (
            (trial, s, json.dumps({"loss": 1.0 + (25.0 if s == 12_345 else 0.0) + s * 1e-5}),
             time.time()) for s in range(1, n + 1)))
    db.close()
    page = _page(browser, cluster, f"#/trials/{trial}")
    page.wait_for_function("Number(document.querySelector('#charts').dataset.points) > 0")
    drawn = page.evaluate("() => window.detCharts['chart-loss'].data")
    assert 100 < len(drawn[0]) <= 4000  # about 2 points per pixel of the chart's width
    assert 12_345 in drawn[0] and max(drawn[1]) == pytest.approx(26.12345)  # the spike kept
    assert f"of {n} points drawn" in page.text_content("#points")

    # zoom in on 200 batches: the page asks for that window and gets all of it
    page.evaluate("() => window.detCharts['chart-loss'].setScale('x', {min: 20000, max: 20199})")
    page.wait_for_function("() => window.detCharts['chart-loss'].data[0].length === 200")
    assert page.is_visible("#unzoom")
    page.click("#unzoom")
    page.wait_for_function("() => window.detCharts['chart-loss'].data[0].at(-1) === 30000")

    page.check("#full")  # every point
    page.wait_for_function(f"() => window.detCharts['chart-loss'].data[0].length === {n}")
    assert page.text_content("#points").strip() == f"{n} points"
    page.context.close()


@pytest.fixture(scope="module")
def fakes(cluster: Cluster) -> Fakes:
    """Trials without TensorFlow, told when to report, crash or obey a pause: what the
    pages show of a trial's life is tested, not Keras (Keras trials' restarts and pauses:
    test_cluster.py; their pages: the ASHA search's above)."""
    return Fakes(cluster, cluster.root / "control")


def test_restarts_and_their_cause_are_on_the_trial_page(browser: Any, cluster: Cluster,
                                                        fakes: Fakes) -> None:
    exp, trial_id, first = fakes.start_trial(name="ui-restart")
    fakes.send(trial_id, "crash")  # killed: the master launches it again
    fakes.wait_started(trial_id, after=first["allocation"])
    fakes.send(trial_id, "finish")
    trial = fakes.wait_state(exp, "COMPLETED", "COMPLETED")["trials"][0]
    assert trial["restarts"] == 1 and trial["state"] == "COMPLETED"
    page = _page(browser, cluster, f"#/trials/{trial['id']}")
    assert page.text_content("#restarts") == "1"
    assert "Restarted 1 time" in page.text_content("#errors")
    page.context.close()


# --- a running experiment: live updates, pause, activate, kill from the pages ------------------


def test_live_curves_then_pause_activate_kill_from_the_page(browser: Any, cluster: Cluster,
                                                            asha: int, fakes: Fakes) -> None:
    exp, trial, first = fakes.start_trial(name="ui-slow")
    fakes.send(trial, "report")
    page = _page(browser, cluster, f"#/trials/{trial}")
    # live: points appear without a reload, as the trial reports them
    fakes.send(trial, "report")
    page.wait_for_function("Number(document.querySelector('#charts').dataset.points || 0) >= 2",
                           timeout=120_000)
    before = int(page.get_attribute("#charts", "data-points"))
    fakes.send(trial, "report")
    page.wait_for_function(
        f"Number(document.querySelector('#charts').dataset.points) > {before}", timeout=30_000)
    _shot(page, "trial-live")
    page.context.close()

    page = _page(browser, cluster, f"#/experiments/{exp}")
    page.click("button[data-act='pause']")
    # the trial hears the pause (the long-poll a real trial asks), and stops
    wait_until("the trial to be asked to stop",
               lambda: fakes.send(trial, "preempted")["preempt"], timeout=60)
    fakes.send(trial, "exit0")
    wait_until("the pause to take effect", lambda: describe(cluster, exp)["trials"][0]["state"]
               == "PAUSED", timeout=120)
    assert describe(cluster, exp)["state"] == "PAUSED"
    t0 = time.time()
    page.wait_for_selector("#exp-state .state-PAUSED", timeout=5000)
    assert time.time() - t0 < 3  # the page follows within the promised 2 s (+ slack)

    page.click("button[data-act='activate']")
    fakes.wait_started(trial, after=first["allocation"])
    wait_until("the trial to run again", lambda: describe(cluster, exp)["trials"][0]["state"]
               == "RUNNING", timeout=120)
    page.wait_for_selector("#exp-state .state-ACTIVE", timeout=5000)

    page.click("button[data-act='kill']")  # SIGTERM to the trial (the fake dies of it)
    wait_until("the kill", lambda: describe(cluster, exp)["state"] == "CANCELED", timeout=120)
    page.wait_for_selector("#exp-state .state-CANCELED", timeout=5000)
    assert page.locator("button[data-act]").count() == 0
    page.context.close()


_JOB_SCRIPT = """\
import os, sys, time
from pathlib import Path
from det_sdk.client import MasterClient
c = MasterClient(os.environ['DET_MASTER'], os.environ['DET_SESSION_TOKEN'])
alloc = os.environ['DET_ALLOCATION_ID']
def rows(n):
    c.report_job_progress(alloc, {'rows_done': n, 'rows_total': 1000, 'output': '/data/preds'})
marker = Path(%r)
if marker.exists():  # activated again after the pause: done
    rows(250)
    sys.exit(0)
marker.touch()
for n in (100, 200, 250):
    rows(n)
    time.sleep(0.3)
for step, loss in ((1, 0.5), (2, 0.25)):  # what report_metrics sends in a job
    c.request('POST', f'/api/v1/allocations/{alloc}/metrics',
              json={'group': 'training', 'steps_completed': step, 'metrics': {'loss': loss}})
print('hello from the job', flush=True)
deadline = time.time() + 300
while not c.preemption(alloc, timeout_seconds=5):  # as a streamed predict between batches
    if time.time() > deadline:
        sys.exit(3)
c.acknowledge_preemption(alloc)
"""


def _buttons(page: Any) -> dict[str, bool]:
    """The job page's action buttons: enabled or not, by action."""
    return page.evaluate("Object.fromEntries([...document.querySelectorAll("
                         "'#job-actions button[data-act]')]"
                         ".map(b => [b.dataset.act, !b.disabled]))")


def test_jobs_list_log_charts_and_buttons(browser: Any, cluster: Cluster, tmp_path: Path) -> None:
    """A job's page (issue 40): its progress, the throughput chart drawn from its progress
    reports and a chart of its metrics; Pause (checked through det job describe) and
    Activate clicked, each enabled only where it applies; then the jobs list."""
    (tmp_path / "job").mkdir()
    # a job's chief reports progress and metrics (as a streamed predict and a job's
    # report_metrics do, without TensorFlow), then waits to be paused
    (tmp_path / "job" / "hello.py").write_text(_JOB_SCRIPT % str(tmp_path / "ran-once"))
    (tmp_path / "job.yaml").write_text("name: ui-job\nentrypoint_script: python3 hello.py\n")
    out = cluster.det("job", "run", str(tmp_path / "job.yaml"), str(tmp_path / "job"), "--json")
    assert out.returncode == 0, out.stderr
    job = int(out.stdout.split("Created job ")[1].split()[0])
    page = _page(browser, cluster, "#/jobs")
    page.wait_for_selector("#jobs tbody tr[data-id] td >> text=ui-job")
    page.click("#jobs tbody tr[data-id] a")
    page.wait_for_function("document.querySelector('#log') && "
                           "document.querySelector('#log').textContent.includes('hello from')",
                           timeout=60_000)
    # the throughput chart: a rate between each two of the three progress reports
    page.wait_for_function("(window.detCharts['job-throughput']?.data[0].length || 0) >= 2",
                           timeout=10_000)
    rates = page.evaluate("window.detCharts['job-throughput'].data[1]")
    assert all(r > 0 for r in rates), rates
    page.wait_for_selector("#job-charts[data-points='2'] canvas", timeout=10_000)
    assert page.evaluate("window.detCharts['job-chart-loss'].data[1]") == [0.5, 0.25]
    page.wait_for_selector("#job-actions[data-state='RUNNING']", timeout=10_000)
    assert _buttons(page) == {"pause": True, "activate": False, "kill": True}

    page.click("#job-actions button[data-act='pause']")
    # polled in this process (a `det` per poll: ~0.3 s of CPU); `det job describe` once below
    wait_until("the pause", lambda: api(cluster).get(f"/api/v1/jobs/{job}").json()["state"]
               == "PAUSED", timeout=120)
    described = cluster.det_json("job", "describe", str(job))
    assert described["latest_metrics"]["training"] == {
        "steps_completed": 2, "epoch": 0, "metrics": {"loss": 0.25}}
    page.wait_for_selector("#job-actions[data-state='PAUSED']", timeout=10_000)
    assert _buttons(page) == {"pause": False, "activate": True, "kill": True}

    page.click("#job-actions button[data-act='activate']")  # it runs again, and finishes
    page.wait_for_selector("#job-state .state-COMPLETED", timeout=60_000)
    page.wait_for_selector("#job-actions[data-state='COMPLETED']", timeout=10_000)
    assert _buttons(page) == {"pause": False, "activate": False, "kill": False}
    # the job page: a progress bar (complete once it has completed), rows, the output
    page.wait_for_selector("#job-progress progress[value='100']", timeout=10_000)
    assert page.text_content("#job-rows") == "250 of 1000 rows"
    assert page.text_content("#job-output") == "/data/preds"
    page.click("a[href='#/jobs']")
    page.wait_for_selector("#jobs tbody tr[data-id] progress[value='100']", timeout=10_000)
    page.context.close()


def test_models_page_lists_each_model_with_its_versions(browser: Any, cluster: Cluster,
                                                          asha: int) -> None:
    """The model registry's page (issue 38): a model registered from the best trial's
    checkpoint shows that checkpoint and links its trial."""
    best = min(describe(cluster, asha)["trials"], key=lambda t: t["best_metric"])
    api = httpx.Client(base_url=cluster.url, timeout=30,
                       headers={"Authorization": f"Bearer {cluster.token}"})
    (ckpt,) = api.get(f"/api/v1/trials/{best['id']}/checkpoints",
                      params={"best": "true"}).json()
    assert cluster.det("model", "create", "ui-model", "--description", "the best").returncode == 0
    assert cluster.det("model", "register-version", "ui-model", ckpt["uuid"]).returncode == 0
    page = _page(browser, cluster, "#/models")
    row = page.wait_for_selector("#models tr[data-model='ui-model']")
    text = row.text_content()
    assert "the best" in text and ckpt["uuid"] in text
    assert page.get_attribute("#models tr[data-model='ui-model'] a[href^='#/trials/']",
                              "href") == f"#/trials/{best['id']}"
    page.context.close()


# --- TensorBoard --------------------------------------------------------------------------------


def test_det_tensorboard_start_list_kill(cluster: Cluster, asha: int,
                                          request: pytest.FixtureRequest) -> None:
    """Determined's `det tensorboard start` (the master runs it), `list`, `logs`, `open`,
    `kill`: one TensorBoard, over the search's trials, serving their event files."""
    pytest.importorskip("tensorboard")
    started = cluster.det("tensorboard", "start", str(asha), "--no-browser", "--config",
                          "description=ui test")
    assert started.returncode == 0, started.stdout + started.stderr
    url = re.search(r"TensorBoard is running at: (http://\S+)", started.stdout).group(1)
    port = int(url.rsplit(":", 1)[1].strip("/"))
    tb_id = re.search(r"\(id: ([0-9a-f-]+)\)", started.stdout).group(1)
    try:
        assert "tb-relative-root" in httpx.get(url, timeout=10).text  # TensorBoard's page
        runs = wait_until("TensorBoard to load the runs", lambda: httpx.get(
            f"{url}data/runs", timeout=10).json(), timeout=60)
        trial_ids = [t["id"] for t in describe(cluster, asha)["trials"]]
        assert {f"trial_{t}/validation" for t in trial_ids} <= set(runs)
        tags = httpx.get(f"{url}data/plugin/scalars/tags", timeout=10).json()
        assert "loss" in tags[f"trial_{trial_ids[0]}/validation"]

        [tb] = cluster.det_json("tensorboard", "list")
        assert (tb["id"], tb["state"], tb["url"], tb["description"], tb["experiment_ids"],
                sorted(tb["trials"])) == (tb_id, "RUNNING", url, "ui test", [asha],
                                          sorted(trial_ids))
        # a start over the same trials answers the one that serves (no second process)
        again = cluster.det("tensorboard", "start", str(asha), "-d")
        assert again.returncode == 0 and again.stdout.strip() == tb_id, again.stderr
        logs = cluster.det("tensorboard", "logs", tb_id)
        assert logs.returncode == 0 and "TensorBoard" in logs.stdout, logs.stderr
        opened = subprocess.run([str(DET), "tensorboard", "open", tb_id[:8]],
                                env={**cluster.env, "BROWSER": "true"}, capture_output=True,
                                text=True, timeout=60)
        assert opened.returncode == 0 and opened.stdout.strip() == url, opened.stderr
        if missing_reason() is None:  # the experiment's page links to it
            page = _page(request.getfixturevalue("browser"), cluster, f"#/experiments/{asha}")
            link = page.wait_for_selector(f"#exp-head a[href*='127.0.0.1:{port}']",
                                          timeout=5000)
            assert link.text_content() == "TensorBoard"
            page.context.close()
    finally:
        killed = cluster.det("tensorboard", "kill", tb_id)
    assert killed.returncode == 0 and killed.stdout.strip() == f"Killed tensorboard {tb_id}"
    assert _refused(port)  # kill returns once its process is gone
    [tb] = cluster.det_json("tensorboard", "list")
    assert (tb["state"], tb["url"], tb["exit_status"]) == ("TERMINATED", None, "killed")
    again = cluster.det("tensorboard", "open", tb_id)
    assert again.returncode == 1 and "must be RUNNING" in again.stderr


def test_det_tensorboard_over_a_runs_directory(cluster: Cluster, asha: int) -> None:
    # --runs-dir: any directory of runs (det-runs of local training); here the folder of
    # the experiment's trials, whose event files the test above checked
    pytest.importorskip("tensorboard")
    runs_dir = cluster.data_dir / "checkpoints" / "tensorboard" / str(asha)
    assert runs_dir.is_dir()
    proc = subprocess.Popen([str(DET), "tensorboard", "run", "--runs-dir", str(runs_dir),
                             "--port", "0"], env=cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"TensorBoard at (http://\S+)", line + proc.stderr.read(0)).group(1)
        assert f"local runs in {runs_dir}" in line
        runs = wait_until("TensorBoard to load the runs",
                          lambda: httpx.get(f"{url}data/runs", timeout=10).json(), timeout=60)
        assert any(r.endswith("/validation") for r in runs)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    bad = cluster.det("tensorboard", "run", "--runs-dir", str(cluster.root / "nothing-here"))
    assert bad.returncode == 1 and "no such directory" in bad.stderr


def _refused(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
    except httpx.HTTPError:
        return True
    return False


def test_nested_hyperparameters_show_by_dotted_name(browser: Any, cluster: Cluster) -> None:
    """Issue 23: nested hyperparameters are columns, scatters and rows named
    ``optimizer.learning_rate`` (a grid of 4 trials that report one validation)."""
    model = cluster.root / "ui-nested-model"
    model.mkdir()
    (model / "train.py").write_text(
        "import det_sdk as det\n"
        "with det.core.init() as core:\n"
        "    lr = core.hparams['optimizer']['learning_rate']\n"
        "    core.train.report_validation_metrics(steps_completed=1, metrics={'val_loss': lr})\n")
    path = cluster.root / "ui-nested.yaml"
    path.write_text(json.dumps({
        "name": "ui-nested", "entrypoint_script": "python3 train.py", "max_restarts": 0,
        "searcher": {"name": "grid", "metric": "val_loss"},
        "hyperparameters": {
            "optimizer": {"learning_rate": {"type": "log", "minval": -3, "maxval": -1,
                                            "count": 2},
                          "name": {"type": "categorical", "vals": ["sgd", "adam"]}},
            "layers": {"dense": {"units": 8}}}}))
    exp = create(cluster, path, model)
    assert cluster.det("experiment", "wait", str(exp)).returncode == 0
    trials = {t["id"]: t["hparams"] for t in describe(cluster, exp)["trials"]}
    assert len(trials) == 4
    page = _page(browser, cluster, f"#/experiments/{exp}")
    heads = page.eval_on_selector_all("#trials th[data-key^='hp.']",
                                      "els => els.map(e => e.dataset.key)")
    assert heads == ["hp.layers.dense.units", "hp.optimizer.learning_rate", "hp.optimizer.name"]
    for row in page.locator("#trials tbody tr").all():
        hp = trials[int(row.get_attribute("data-id"))]
        assert row.locator("td[data-hp='optimizer.name']").text_content() == \
            hp["optimizer"]["name"]
        assert float(row.locator("td[data-hp='optimizer.learning_rate']").text_content()) == \
            pytest.approx(hp["optimizer"]["learning_rate"], rel=1e-3)
        assert row.locator("td[data-hp='layers.dense.units']").text_content() == "8"
    # the two leaves that vary have a scatter each; the constant one has none
    scatter = page.evaluate("window.detCharts['scatter-optimizer.learning_rate']")
    assert sorted(p["x"] for p in scatter["points"]) == pytest.approx(sorted(
        h["optimizer"]["learning_rate"] for h in trials.values()))
    assert {p["x"] for p in scatter["points"]} == {p["y"] for p in scatter["points"]}
    assert "optimizer.name" in page.evaluate("window.detCharts['parcoords'].dims")
    assert page.evaluate("window.detCharts['scatter-layers.dense.units'] === undefined")
    page.context.close()

    first = min(trials)
    page = _page(browser, cluster, f"#/trials/{first}")
    assert page.text_content("#hparams td[data-hp='optimizer.name']") == \
        trials[first]["optimizer"]["name"]
    assert page.text_content("#hparams td[data-hp='layers.dense.units']") == "8"
    page.context.close()
