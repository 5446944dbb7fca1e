"""The webhooks' pieces without a master: validation, matching, the delivery workers'
bounds (back-off, a full queue, a URL that never answers) against a real HTTP server in a
thread, and the log watcher on a real file. The end-to-end test is
tests/e2e/test_webhooks.py."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from det_sdk.master.errors import Conflict, InvalidRequest
from det_sdk.master.store import Store
from det_sdk.master.webhook_delivery import Deliverer, Job, signed_headers
from det_sdk.master.webhook_logs import LogWatcher, compile_regex
from det_sdk.master.webhooks import Webhooks


class _Server:
    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.bodies: list[tuple[bytes, dict[str, str]]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.times.setdefault(self.path, []).append(time.monotonic())
                server.bodies.append((body, dict(self.headers)))
                if self.path == "/hang":
                    server.release.wait(30)
                    return
                self.send_response(500 if self.path == "/fail" else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    threading.Thread(target=s.http.serve_forever, daemon=True).start()
    yield s
    s.release.set()
    s.http.shutdown()
    s.http.server_close()


def _wait(cond: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


def test_retries_back_off_and_a_hanging_url_is_cut(server: _Server) -> None:
    outcomes: dict[int, tuple[str, int, int | None, str | None]] = {}

    def record(did: int, state: str, attempts: int, status: int | None,
               error: str | None) -> None:
        outcomes[did] = (state, attempts, status, error)

    d = Deliverer(record, attempts=3, backoff=0.2, timeout=0.5, workers=2)
    d.start()
    try:
        started = time.monotonic()
        assert d.submit(Job(1, f"{server.url}/fail", b"{}", "k", "fail"))
        assert d.submit(Job(2, f"{server.url}/hang", b"{}", "k", "hang"))
        assert d.submit(Job(3, f"{server.url}/ok", b'{"a": 1}', "key", "ok"))
        _wait(lambda: all(outcomes.get(i, ("",))[0] in ("DELIVERED", "FAILED")
                          for i in (1, 2, 3)))
        # 3 attempts of at most 0.5 s, 0.2 and 0.4 s apart
        assert time.monotonic() - started < 5
    finally:
        d.stop()
    assert outcomes[1] == ("FAILED", 3, 500, "answered 500")
    gaps = [b - a for a, b in zip(server.times["/fail"], server.times["/fail"][1:])]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, gaps
    assert outcomes[2][:3] == ("FAILED", 3, None) and "no answer within" in str(outcomes[2][3])
    assert outcomes[3] == ("DELIVERED", 1, 200, None)
    body, headers = next((b, h) for b, h in server.bodies if b == b'{"a": 1}')
    stamp = headers["X-Determined-AI-Signature-Timestamp"]
    assert headers["X-Determined-AI-Signature"] == hmac.new(
        b"key", f"{stamp},".encode() + body, hashlib.sha256).hexdigest()


def test_a_full_queue_refuses_at_once() -> None:
    d = Deliverer(lambda *a: None, capacity=2)  # not started: nothing drains it
    assert d.submit(Job(1, "http://x/", b"", "k", "a"))
    assert d.submit(Job(2, "http://x/", b"", "k", "a"))
    started = time.monotonic()
    assert not d.submit(Job(3, "http://x/", b"", "k", "a"))
    assert time.monotonic() - started < 0.1 and d.pending() == 2
    assert set(signed_headers("k", b"")) >= {"X-Determined-AI-Signature",
                                             "X-Determined-AI-Signature-Timestamp"}


def test_webhooks_validate_match_and_record(server: _Server) -> None:
    hooks = Webhooks(Store(":memory:"), capacity=1)
    good = {"name": "ops", "url": f"{server.url}/ok", "webhook_type": "WEBHOOK_TYPE_DEFAULT",
            "triggers": [{"trigger_type": "EXPERIMENT_STATE_CHANGE",
                          "condition": {"state": "COMPLETED"}}]}
    for bad, field in (({"url": "gopher://x/"}, "url"), ({"url": "http:///p"}, "url"),
                       ({"webhook_type": "EMAIL"}, "webhook_type"), ({"triggers": []},
                                                                     "triggers"),
                       ({"triggers": [{"trigger_type": "TASK_LOG",
                                       "condition": {"regex": "(?=x)"}}]}, "regex"),
                       ({"mode": "GLOBAL"}, "mode"), ({"workspace_id": 3}, "workspace_id")):
        with pytest.raises(InvalidRequest, match=field):
            hooks.create({**good, **bad})
    created = hooks.create(good)
    assert len(created["signing_key"]) == 64
    assert "signing_key" not in str(hooks.listed())
    with pytest.raises(Conflict):
        hooks.create(good)
    specific = hooks.create({**good, "name": "named", "mode": "SPECIFIC"})
    exp = {"id": 7, "name": "e", "state": "COMPLETED", "created": 0.0, "config": {}}
    hooks.experiment_state(exp)
    hooks.experiment_state({**exp, "state": "ERROR"})  # no trigger of that state
    hooks.experiment_state({**exp, "config": {"integrations": {"webhooks": {
        "exclude": True}}}})
    # queued once (capacity 1, not started): the next is recorded FAILED, not waited for
    hooks.experiment_state({**exp, "config": {"integrations": {"webhooks": {
        "webhook_name": ["named"]}}}})
    rows = hooks.deliveries(None, 10)
    assert [(r["webhook_id"], r["state"]) for r in rows] == [
        (specific["id"], "FAILED"), (created["id"], "FAILED"), (created["id"], "QUEUED")]
    assert "full" in rows[0]["error"]
    # a restarted master resumes the queued one (its body kept), fails none
    assert [d["id"] for d in hooks.tables.unfinished()] == [rows[2]["id"]]
    assert hooks.tables.fail_unfinished("restart") == 0


def test_the_log_watcher_fires_once_per_trial_and_trigger(tmp_path: Path) -> None:
    log = tmp_path / "trial.log"
    log.write_bytes(b"a" * 3000 + b"b\nloss is NaN\nloss is ")
    fired: list[tuple[int, str]] = []
    trigger = {"id": 1}
    watcher = LogWatcher(lambda: [(trigger, compile_regex("^(a+)+$|loss is NaN"))],
                         lambda: [(5, 2, "alloc", log)],
                         lambda t, e, a, line, trig: fired.append((t, line)))
    started = time.monotonic()
    watcher.scan()
    assert time.monotonic() - started < 1  # RE2: linear on the 3001 characters
    with log.open("ab") as f:
        f.write(b"NaN\n")
    watcher.scan()
    assert fired == [(5, "loss is NaN")]
