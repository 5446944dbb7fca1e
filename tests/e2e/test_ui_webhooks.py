"""The web UI's Webhooks page (issue 60) in headless Chromium against a real master and
a real HTTP receiver: create a webhook (its signing key shown once, then never again),
test it (the receiver gets a signed POST, the page lists the delivery DELIVERED), delete
it; a user who is not an admin is refused the page's data and actions, as the API's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from harness.master import Cluster

pytestmark = pytest.mark.stack_neutral


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A real HTTP server on 127.0.0.1 answering 204 and keeping each POST."""
    got: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            got.append({"body": body, "headers": dict(self.headers)})
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()


def test_webhooks_page_creates_tests_and_deletes(
        cluster: Cluster, receiver: tuple[str, list[dict[str, Any]]]) -> None:
    from harness.browser import missing_reason, open_browser, signed_in_context

    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    url, got = receiver
    with open_browser() as browser:
        page = signed_in_context(browser, cluster.url, cluster.token).new_page()
        page.on("dialog", lambda dialog: dialog.accept())  # Delete's confirm
        page.set_default_timeout(90_000)  # a loaded CI machine: bounded, generous
        page.goto(f"{cluster.url}/ui/#/webhooks")
        page.wait_for_function("document.body.dataset.ready === '#/webhooks'")
        assert "No webhooks yet" in str(page.text_content("#webhooks"))

        page.fill("#wh-name", "ui-hook")
        page.fill("#wh-url", url)
        page.check(".wh-state[value=COMPLETED]")
        page.check("#wh-custom")
        page.click("#webhook-form button[type=submit]")
        page.wait_for_selector("#webhook-secret:not([hidden])")
        key = str(page.text_content("#wh-secret")).strip()
        assert len(key) == 64
        page.wait_for_selector("#webhooks tr[data-name='ui-hook']")
        row = str(page.text_content("#webhooks tr[data-name='ui-hook']"))
        assert url in row and "state COMPLETED" in row and "custom" in row
        # the key is in that one answer only: not in the list, not after a reload
        with cluster.http() as http:
            listed = http.get("/ui/api/webhooks", headers={"X-Det-UI": "1"}).json()
        assert key not in json.dumps(listed)

        page.click("#webhooks tr[data-name='ui-hook'] .wh-test")
        page.wait_for_function("document.querySelector(\"#webhooks tr[data-name='ui-hook'] "
                               ".wh-result\")?.textContent === 'delivered'")
        (sent,) = got
        stamp = sent["headers"]["X-Determined-AI-Signature-Timestamp"]
        want = hmac.new(key.encode(), stamp.encode() + b"," + sent["body"],
                        hashlib.sha256).hexdigest()
        assert sent["headers"]["X-Determined-AI-Signature"] == want
        page.wait_for_selector("#webhook-deliveries tr[data-state='DELIVERED']")
        delivered = str(page.text_content("#webhook-deliveries tr[data-state='DELIVERED']"))
        assert "ui-hook" in delivered and "TEST" in delivered and "204" in delivered

        page.reload()
        page.wait_for_selector("#webhooks tr[data-name='ui-hook']")
        assert key not in str(page.content())
        # a bad URL: the master's message on the page, nothing created
        page.fill("#wh-name", "bad")
        page.fill("#wh-url", "gopher://x/")
        page.check(".wh-state[value=ERROR]")
        page.click("#webhook-form button[type=submit]")
        page.wait_for_selector("#webhook-error:not([hidden])")
        assert "url" in str(page.text_content("#webhook-error"))

        page.click("#webhooks tr[data-name='ui-hook'] .wh-delete")
        page.wait_for_selector("#webhooks tr[data-name='ui-hook']", state="detached")
        assert "No webhooks yet" in str(page.text_content("#webhooks"))
        page.context.close()


def test_webhooks_page_is_admin_only(cluster: Cluster) -> None:
    with cluster.http() as http:
        r = http.post("/api/v1/users", json={"user": {"username": "carol"},
                                             "password": "carol-password-60"})
        assert r.status_code == 201, r.text
    with httpx.Client(base_url=cluster.url, timeout=30) as carol:
        r = carol.post("/ui/signin", data={"username": "carol",
                                           "password": "carol-password-60"})
        assert r.status_code == 303, r.text
        ui = {"X-Det-UI": "1"}
        assert carol.get("/ui/api/experiments").status_code == 200  # signed in
        assert carol.get("/ui/api/webhooks", headers=ui).status_code == 403
        hook = {"name": "x", "url": "http://127.0.0.1:9/", "webhook_type": "DEFAULT",
                "triggers": [{"trigger_type": "CUSTOM"}]}
        assert carol.post("/ui/api/webhooks", json=hook, headers=ui).status_code == 403
        assert carol.post("/ui/api/webhooks/1/test", headers=ui).status_code == 403
        assert carol.delete("/ui/api/webhooks/1", headers=ui).status_code == 403
    # an admin's session without the UI's action header changes nothing
    with cluster.http() as http:
        hook = {"name": "y", "url": "http://127.0.0.1:9/", "webhook_type": "DEFAULT",
                "triggers": [{"trigger_type": "CUSTOM"}]}
        assert http.post("/ui/api/webhooks", json=hook, headers=ui).status_code == 200
