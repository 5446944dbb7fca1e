"""Webhooks (issue 60) against a real master, the real `det` CLI and a real HTTP receiver
this module starts: state triggers of an experiment that completes and of one that errors,
a script's custom alert (``core_context.alert``), the DEFAULT body signed as Determined
signs it (checked here with this test's own HMAC), the SLACK body, and URLs that answer
500, never answer or redirect in a loop, listed as failed within a bound while the
master keeps answering. The signing key is printed once and never again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.master import Cluster, wait_until
from tests.lifecycle_harness import Fakes

# Stack-neutral: this module tests the master and the CLI; the trials load no framework.
pytestmark = pytest.mark.stack_neutral

# a trial with no framework: one alert, one metric, then the exit code it is given
SCRIPT = """\
import sys

import det_sdk as det

with det.core.init() as core_context:
    core_context.alert(title="loss spiked", description="at step 40", level="warn")
    core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
# lines for the TASK_LOG triggers: one that backtracking regexes never finish with
# `(a+)+$`, then one each trigger matches
print("a" * 3000 + "b")
print("step 40: loss is NaN")
print("a" * 40)
sys.exit(int(sys.argv[1]))
"""


class Receiver:
    """A real HTTP server on 127.0.0.1: ``/ok/<tag>`` answers 204 and keeps the request,
    ``/fail`` 500, ``/redirect`` a redirect to itself, ``/hang`` never answers (until
    the server stops)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.hits: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.hits[self.path] = receiver.hits.get(self.path, 0) + 1
                    if self.path.startswith("/ok/"):
                        receiver.requests.append({"path": self.path, "body": body,
                                                  "headers": dict(self.headers)})
                if self.path == "/hang":
                    receiver.stopping.wait(120)  # bounded: the server stops with the module
                    return
                if self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", "/redirect")
                elif self.path == "/fail":
                    self.send_response(500)
                else:
                    self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def received(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["path"] == path]


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield r
    finally:
        r.stopping.set()
        r.server.shutdown()
        r.server.server_close()


def _det_ok(cluster: Cluster, *args: str) -> str:
    out = cluster.det(*args)
    assert out.returncode == 0, f"det {' '.join(args)}: {out.stdout}{out.stderr}"
    return out.stdout


def _create(cluster: Cluster, name: str, url: str, *options: str) -> dict[str, Any]:
    return json.loads(_det_ok(cluster, "webhook", "create", name, url, *options, "--json"))


def _experiment(cluster: Cluster, model: Path, name: str, code: int,
                **overrides: Any) -> int:
    config = {"name": name, "entrypoint_script": f"python3 alert.py {code}",
              "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
              "max_restarts": 0, **overrides}
    path = model.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return int(json.loads(_det_ok(cluster, "experiment", "create", str(path), str(model),
                                  "--json"))["id"])


def _signed(body: bytes, headers: dict[str, str], key: str) -> bool:
    """This test's own check of Determined's signature: hex HMAC-SHA256 of
    ``"<timestamp>,<body>"`` under the key, in X-Determined-AI-Signature."""
    stamp = headers["X-Determined-AI-Signature-Timestamp"]
    want = hmac.new(key.encode(), stamp.encode() + b"," + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, headers["X-Determined-AI-Signature"])


def _deliveries(cluster: Cluster, webhook_id: int) -> list[dict[str, Any]]:
    return json.loads(_det_ok(cluster, "webhook", "deliveries", "--webhook", str(webhook_id),
                              "--json"))


def test_bad_webhooks_are_refused_and_the_key_is_shown_once(cluster: Cluster,
                                                             receiver: Receiver) -> None:
    refused = cluster.det("webhook", "create", "files", "file:///etc/passwd", "--state",
                          "COMPLETED")
    assert refused.returncode != 0 and "url" in refused.stderr and "file" in refused.stderr
    no_trigger = cluster.det("webhook", "create", "quiet", f"{receiver.url}/ok/x")
    assert no_trigger.returncode != 0 and "--state" in no_trigger.stderr
    with cluster.http() as http:
        r = http.post("/api/v1/webhooks", json={
            "name": "logs", "url": f"{receiver.url}/ok/x", "webhook_type": "DEFAULT",
            "triggers": [{"trigger_type": "TRIGGER_TYPE_TASK_LOG",
                          "condition": {"regex": r"(a)\1"}}]})  # a backreference: not RE2
        assert r.status_code == 400 and "condition.regex" in r.json()["detail"]
        r = http.post("/api/v1/webhooks", json={
            "name": "bad-state", "url": f"{receiver.url}/ok/x", "webhook_type": "DEFAULT",
            "triggers": [{"trigger_type": "EXPERIMENT_STATE_CHANGE",
                          "condition": {"state": "DONE"}}]})
        assert r.status_code == 400 and "condition.state" in r.json()["detail"]
        r = http.post("/api/v1/webhooks", json={
            "name": "nowhere", "url": f"{receiver.url}/ok/x", "webhook_type": "DEFAULT",
            "workspace_id": 999, "triggers": [{"trigger_type": "CUSTOM"}]})
        assert r.status_code == 400 and "workspace_id" in r.json()["detail"], r.text

    text = _det_ok(cluster, "webhook", "create", "once", f"{receiver.url}/ok/once", "--state",
                   "COMPLETED")
    key = text.strip().splitlines()[-1]
    assert len(key) == 64 and int(key, 16) >= 0, text
    dup = cluster.det("webhook", "create", "once", f"{receiver.url}/ok/again", "--custom")
    assert dup.returncode != 0 and "exists" in dup.stderr
    listed = _det_ok(cluster, "webhook", "list") + _det_ok(cluster, "webhook", "list", "--json")
    assert "once" in listed and key not in listed and "signing_key" not in listed
    (hook,) = [h for h in json.loads(_det_ok(cluster, "webhook", "list", "--json"))
               if h["name"] == "once"]
    assert hook["triggers"][0]["condition"] == {"state": "COMPLETED"}
    _det_ok(cluster, "webhook", "delete", str(hook["id"]))
    assert "once" not in _det_ok(cluster, "webhook", "list")
    assert cluster.det("webhook", "delete", str(hook["id"])).returncode != 0


def test_experiments_fire_signed_events_and_bad_urls_are_listed_failed(
        cluster: Cluster, receiver: Receiver, tmp_path: Path) -> None:
    url = receiver.url
    states = _create(cluster, "states", f"{url}/ok/states", "--state", "COMPLETED",
                     "--state", "ERROR")
    slack = _create(cluster, "slack", f"{url}/ok/slack", "--type", "slack", "--state",
                    "COMPLETED")
    alerts = _create(cluster, "alerts", f"{url}/ok/alerts", "--custom")
    failing = _create(cluster, "failing", f"{url}/fail", "--state", "COMPLETED")
    hanging = _create(cluster, "hanging", f"{url}/hang", "--state", "COMPLETED")
    looping = _create(cluster, "looping", f"{url}/redirect", "--state", "COMPLETED")
    logs = _create(cluster, "logs", f"{url}/ok/logs", "--log-regex", "loss is (NaN|inf)")
    # catastrophic for a backtracking engine on the script's 3001-character line: RE2's time
    # is linear, so the master goes on (and the line without the b matches)
    catastrophic = _create(cluster, "catastrophic", f"{url}/ok/catastrophic", "--log-regex",
                           "^(a+)+$")
    # a SPECIFIC webhook that no experiment names hears nothing
    unnamed = _create(cluster, "unnamed", f"{url}/ok/unnamed", "--state", "COMPLETED",
                      "--mode", "specific")
    # a workspace's webhook hears its experiments only (issue 59's workspaces): these
    # experiments are filed in Uncategorized, none in "hooked"
    _det_ok(cluster, "workspace", "create", "hooked")
    home = _create(cluster, "home", f"{url}/ok/home", "--state", "COMPLETED",
                   "--workspace", "Uncategorized")
    elsewhere = _create(cluster, "elsewhere", f"{url}/ok/elsewhere", "--state", "COMPLETED",
                        "--workspace", "hooked")
    assert home["workspace_id"] == 1 and elsewhere["workspace_id"] not in (0, 1)

    model = tmp_path / "model"
    model.mkdir()
    (model / "alert.py").write_text(SCRIPT)
    done = _experiment(cluster, model, "completes", 0,
                       integrations={"webhooks": {"webhook_name": ["alerts"]}})
    failed = _experiment(cluster, model, "errors", 3)

    def event(path: str, exp_id: int, kind: str) -> dict[str, Any] | None:
        for r in receiver.received(path):
            body = json.loads(r["body"])
            if body.get("event_type") == kind and \
                    body["event_data"]["experiment"]["id"] == exp_id:
                return {**r, "json": body}
        return None

    completed = wait_until("the COMPLETED event", lambda: event("/ok/states", done,
                                                                "EXPERIMENT_STATE_CHANGE"),
                           timeout=120, every=0.2)
    assert completed["json"]["condition"] == {"state": "COMPLETED"}
    assert completed["json"]["event_data"]["experiment"]["name"] == "completes"
    assert _signed(completed["body"], completed["headers"], states["signing_key"])
    assert not _signed(completed["body"], completed["headers"], slack["signing_key"])
    errored = wait_until("the ERROR event", lambda: event("/ok/states", failed,
                                                          "EXPERIMENT_STATE_CHANGE"),
                         timeout=120, every=0.2)
    assert errored["json"]["condition"] == {"state": "ERROR"}
    assert _signed(errored["body"], errored["headers"], states["signing_key"])

    custom = wait_until("the custom alert", lambda: event("/ok/alerts", done, "CUSTOM"),
                        timeout=60, every=0.2)
    assert custom["json"]["event_data"]["custom_data"] == {
        "title": "loss spiked", "description": "at step 40", "level": "WARNING"}
    assert custom["json"]["event_data"]["experiment"]["trial_id"] > 0
    assert _signed(custom["body"], custom["headers"], alerts["signing_key"])
    # the experiment that errored named no webhook: its alert went nowhere
    assert event("/ok/alerts", failed, "CUSTOM") is None

    def logged(path: str) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in receiver.received(path)]

    matched = wait_until("the TASK_LOG events", lambda: len(logged("/ok/logs")) >= 2 and
                         logged("/ok/logs"), timeout=60, every=0.2)
    # once per trial: the experiment that completes and the one that errors
    assert len(matched) == 2 and {m["event_type"] for m in matched} == {"TASK_LOG"}
    assert {m["event_data"]["task_log"]["triggering_log"] for m in matched} == {
        "step 40: loss is NaN"}
    assert matched[0]["condition"] == {"regex": "loss is (NaN|inf)"}
    assert all(_signed(r["body"], r["headers"], logs["signing_key"])
               for r in receiver.received("/ok/logs"))
    lines = wait_until("the catastrophic regex's events",
                       lambda: len(logged("/ok/catastrophic")) >= 2 and
                       logged("/ok/catastrophic"), timeout=60, every=0.2)
    assert {m["event_data"]["task_log"]["triggering_log"] for m in lines} == {"a" * 40}

    message = wait_until("the Slack message", lambda: receiver.received("/ok/slack"),
                         timeout=60, every=0.2)[0]
    slack_json = json.loads(message["body"])
    assert slack_json["blocks"][0]["text"]["text"].startswith("Your experiment completed")
    assert "completes" in slack_json["attachments"][0]["blocks"][0]["text"]["text"]

    # the master answers at once while a delivery hangs
    started = time.monotonic()
    _det_ok(cluster, "webhook", "list")
    assert time.monotonic() - started < 10

    def ended(hook: dict[str, Any]) -> dict[str, Any] | None:
        rows = _deliveries(cluster, hook["id"])
        return rows[0] if rows and rows[0]["state"] in ("DELIVERED", "FAILED") else None

    # 3 attempts of at most 5 s each, 1 s and 2 s apart: well within 60 s
    fail = wait_until("the 500 URL's delivery to fail", lambda: ended(failing), timeout=60)
    assert (fail["state"], fail["attempts"], fail["status_code"]) == ("FAILED", 3, 500)
    hang = wait_until("the hanging URL's delivery to fail", lambda: ended(hanging), timeout=60)
    assert hang["state"] == "FAILED" and hang["attempts"] == 3
    assert "no answer within" in hang["error"]
    loop = wait_until("the redirect loop's delivery to fail", lambda: ended(looping),
                      timeout=60)
    assert loop["state"] == "FAILED" and loop["attempts"] == 1 and "redirect" in loop["error"]
    assert receiver.hits.get("/fail") == 3 and receiver.hits.get("/redirect") == 1
    assert ended(states)["state"] == "DELIVERED"
    assert _deliveries(cluster, unnamed["id"]) == [] and not receiver.received("/ok/unnamed")
    assert wait_until("the workspace's webhook", lambda: event("/ok/home", done,
                                                               "EXPERIMENT_STATE_CHANGE"),
                      timeout=60, every=0.2)
    assert _deliveries(cluster, elsewhere["id"]) == [] and not receiver.received("/ok/elsewhere")
    table = _det_ok(cluster, "webhook", "deliveries")
    assert "FAILED" in table and "DELIVERED" in table

    # the signing keys are in no answer and no log of the master's
    master_log = (cluster.data_dir / "master.log").read_text(errors="replace")
    listed = _det_ok(cluster, "webhook", "list", "--json")
    for hook in (states, slack, alerts, failing, hanging, looping, logs, catastrophic):
        assert hook["signing_key"] not in master_log
        assert hook["signing_key"] not in listed


def test_pause_and_kill_fire_paused_and_canceled_and_a_task_alerts_only_its_trial(
        cluster: Cluster, receiver: Receiver, fakes: Fakes) -> None:
    hook = _create(cluster, "pauses", f"{receiver.url}/ok/pauses", "--state", "PAUSED",
                   "--state", "STOPPING_CANCELED", "--state", "CANCELED", "--custom")
    exp_id, trial_id, proc = fakes.start_trial(
        integrations={"webhooks": {"webhook_id": [hook["id"]]}})
    other_id, other_trial, _ = fakes.start_trial()
    alloc = fakes.running_allocation(trial_id)
    assert alloc is not None and proc["allocation"] == alloc["id"]
    task = {"Authorization": f"Bearer {alloc['token']}"}
    # a task's token sends its own trial's alert, never another trial's
    body = {"data": {"title": "t", "description": "d", "level": "LOG_LEVEL_ERROR"},
            "experiment_id": other_id, "trial_id": other_trial}
    with cluster.http(token=None) as http:
        assert http.post("/api/v1/webhooks/custom", json=body, headers=task).status_code == 403
        own = {**body, "experiment_id": exp_id, "trial_id": trial_id}
        assert http.post("/api/v1/webhooks/custom", json=own, headers=task).status_code == 200
        # nor may it manage webhooks
        assert http.get("/api/v1/webhooks", headers=task).status_code == 403
    fakes.command(exp_id, "pause")
    fakes.send(trial_id, "exit0")
    fakes.wait_state(exp_id, "PAUSED", "PAUSED")
    fakes.command(exp_id, "kill")
    fakes.wait_state(exp_id, "CANCELED", "CANCELED")
    fakes.command(other_id, "kill")

    def states() -> list[str]:
        events = [json.loads(r["body"]) for r in receiver.received("/ok/pauses")]
        return sorted(e["condition"]["state"] for e in events
                      if e["event_type"] == "EXPERIMENT_STATE_CHANGE"
                      and e["event_data"]["experiment"]["id"] == exp_id)

    # PAUSED; a kill of a paused experiment: STOPPING_CANCELED, then CANCELED (sent by
    # workers side by side: their order of arrival is not the order of the states)
    assert wait_until("PAUSED and CANCELED", lambda: len(states()) >= 3 and states(),
                      timeout=60, every=0.2) == ["CANCELED", "PAUSED", "STOPPING_CANCELED"]
    # the other experiment, killed while it ran, is heard too (mode WORKSPACE)
    wait_until("the other experiment's CANCELED", lambda: any(
        json.loads(r["body"])["event_data"]["experiment"]["id"] == other_id and
        json.loads(r["body"])["condition"]["state"] == "CANCELED"
        for r in receiver.received("/ok/pauses")), timeout=60, every=0.2)
    (alert,) = [json.loads(r["body"]) for r in receiver.received("/ok/pauses")
                if json.loads(r["body"])["event_type"] == "CUSTOM"]
    assert alert["event_data"]["custom_data"]["level"] == "ERROR"
    assert alert["event_data"]["experiment"]["trial_id"] == trial_id
