"""Webhook deliveries kept across a master restart (issue 60): a real master queues a
COMPLETED event to a real HTTP receiver this module starts, which answers 500 (a retry
waits) and then holds the retry unanswered while the test stops the master with
`det master down`; a new master on the same data resumes the delivery (its attempts
counted on, the same signed body) and it is delivered, while a delivery that had already
failed stays listed as failed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.master import Cluster, running_cluster, wait_for_experiment, wait_until

pytestmark = pytest.mark.stack_neutral

SCRIPT = """
import det_sdk as det

with det.core.init() as core_context:
    core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
"""


class Receiver:
    """``/flaky``: 500 at the first request, then holds each request unanswered until
    :attr:`healthy` is set, after which it answers 204 (and the held ones 500, to a master
    that is gone). ``/gone``: 404 (a final failure). Keeps every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.healthy = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                healthy = receiver.healthy.is_set()
                with receiver.lock:
                    receiver.requests.append({"path": self.path, "body": body,
                                              "headers": dict(self.headers),
                                              "healthy": healthy})
                    first = len([r for r in receiver.requests if r["path"] == self.path]) == 1
                status = 204 if healthy else 500
                if self.path == "/gone":
                    status = 404
                elif not healthy and not first:
                    receiver.healthy.wait(120)  # bounded: set by the test, or it gives up
                    status = 500
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def hits(self, path: str) -> list[dict[str, Any]]:
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
        r.healthy.set()
        r.server.shutdown()
        r.server.server_close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


def _det(cluster: Cluster, *args: str) -> str:
    out = cluster.det(*args)
    assert out.returncode == 0, f"det {' '.join(args)}: {out.stdout}{out.stderr}"
    return out.stdout


def _delivery(cluster: Cluster, webhook_id: int) -> dict[str, Any]:
    """The webhook's one delivery, as `det webhook deliveries --json` lists it (read
    through the API here: the waits poll it)."""
    with cluster.http() as http:
        r = http.get("/api/v1/webhooks/deliveries", params={"webhook_id": webhook_id})
    assert r.status_code == 200, r.text
    (only,) = r.json()["deliveries"]
    return dict(only)


def test_a_retry_resumes_after_a_master_restart(cluster: Cluster, receiver: Receiver,
                                                tmp_path: Path) -> None:
    flaky = json.loads(_det(cluster, "webhook", "create", "flaky", f"{receiver.url}/flaky",
                            "--state", "COMPLETED", "--json"))
    gone = json.loads(_det(cluster, "webhook", "create", "gone", f"{receiver.url}/gone",
                           "--state", "COMPLETED", "--json"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "train.py").write_text(textwrap.dedent(SCRIPT))
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "name": "restart-webhooks", "entrypoint": "python3 train.py", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "loss", "max_length": 1}}))
    exp = int(json.loads(_det(cluster, "experiment", "create", str(config), str(model),
                              "--json"))["id"])
    wait_for_experiment(cluster, exp, "the experiment", timeout=120)

    # the first attempt was answered 500: a retry waits (held by the receiver if it comes)
    wait_until("the flaky delivery's retry",
               lambda: _delivery(cluster, flaky["id"])["state"] == "SENDING", timeout=120)
    wait_until("the 404 delivery's failure",
               lambda: _delivery(cluster, gone["id"])["state"] == "FAILED", timeout=120)
    before = _delivery(cluster, flaky["id"])
    cluster.down()
    receiver.healthy.set()  # from now on /flaky answers 204
    sent_before = len(receiver.hits("/flaky"))
    cluster.up()

    wait_until("the resumed delivery",
               lambda: _delivery(cluster, flaky["id"])["state"] == "DELIVERED", timeout=120)
    # the listed outcomes, as the CLI shows them after the restart
    listed = json.loads(_det(cluster, "webhook", "deliveries", "--json"))
    assert {(d["webhook_id"], d["state"]) for d in listed} == {
        (flaky["id"], "DELIVERED"), (gone["id"], "FAILED")}, listed
    after = _delivery(cluster, flaky["id"])
    assert after["id"] == before["id"] and after["status_code"] == 204
    # the attempts counted on from the first master's (not from 1 again)
    assert after["attempts"] > before["attempts"], (before, after)
    hits = receiver.hits("/flaky")
    delivered = [h for h in hits[sent_before:] if h["healthy"]]
    assert delivered, hits
    # the same event, signed with the webhook's key, as the first master sent it
    assert all(h["body"] == hits[0]["body"] for h in hits), hits
    body = json.loads(hits[0]["body"])
    assert body["event_type"] == "EXPERIMENT_STATE_CHANGE" and body["event_data"][
        "experiment"]["id"] == exp
    head = delivered[-1]["headers"]
    stamp = head["X-Determined-AI-Signature-Timestamp"]
    want = hmac.new(flaky["signing_key"].encode(), stamp.encode() + b"," + hits[0]["body"],
                    hashlib.sha256).hexdigest()
    assert hmac.compare_digest(want, head["X-Determined-AI-Signature"])
    # an outcome listed before the restart is listed the same after it
    failed = _delivery(cluster, gone["id"])
    assert (failed["state"], failed["status_code"]) == ("FAILED", 404)
    assert len(receiver.hits("/gone")) == 1  # a final failure is not resent
