"""The web UI's Tasks page (issue 58, item 6) as a person uses it: a real master, a real
command started with the real ``det cmd run``, the page in headless Chromium under the
enforced Content-Security-Policy: the command's row, its log, Kill from the page and the
row TERMINATED; another (non-admin) user sees the row but no Kill, and the master refuses
that user's kill through the UI's route all the same.

One master for the module (``cluster``, tests/e2e/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.browser import missing_reason, open_browser, signed_in_context
from harness.master import Cluster, wait_until

pytestmark = [pytest.mark.stack_neutral, pytest.mark.timeout(300)]

# the policy's violations and the page's errors, collected from the first script on
CSP_PROBE = """window.__csp = [];
    document.addEventListener('securitypolicyviolation',
        (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    with open_browser() as b:
        yield b


def _state(cluster: Cluster, cmd_id: int) -> str:
    with cluster.http() as http:
        return str(http.get(f"/api/v1/commands/{cmd_id}").json()["command"]["state"])


def _other_user(cluster: Cluster) -> str:
    """A non-admin user's token."""
    with cluster.http() as http:
        r = http.post("/api/v1/users", json={"user": {"username": "tasks-ann"},
                                             "password": "tasks-ann-password"})
        assert r.status_code == 201, r.text
        login = http.post("/api/v1/auth/login", json={"username": "tasks-ann",
                                                       "password": "tasks-ann-password"})
        return str(login.json()["token"])


def test_tasks_page_lists_a_command_shows_its_log_and_kills_it(browser: Any,
                                                                cluster: Cluster) -> None:
    out = cluster.det("cmd", "run", "-d", "--", "sh", "-c",
                      "echo tasks-page-hello; exec sleep 300")
    assert out.returncode == 0, out.stderr
    cmd_id = int(out.stdout.strip())
    wait_until(f"command {cmd_id} to run", lambda: _state(cluster, cmd_id) == "RUNNING",
               timeout=60, every=0.2)

    context = signed_in_context(browser, cluster.url, cluster.token, enforce_csp=True)
    context.add_init_script(CSP_PROBE)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: d.accept())  # Kill's confirmation
    page.goto(f"{cluster.url}/ui/#/experiments")
    page.wait_for_selector("body[data-ready='#/experiments']")
    page.click("nav a[data-nav='tasks']")  # the navigation leads there
    page.wait_for_selector("body[data-ready='#/tasks']")
    row = page.locator(f"#tasks tr[data-kind='command'][data-id='{cmd_id}']")
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    # kind, description (Determined's: the command line), owner (the master's first
    # user), state, slots, start time
    assert cells[1] == "Command" and "tasks-page-hello" in cells[2], cells
    assert cells[3] == "determined" and cells[5] == "1", cells
    assert "RUNNING" in cells[4] and "ago" in cells[6], cells

    # its log, in the shared log view
    row.locator("a.task-logs").click()
    page.wait_for_selector(f"body[data-ready='#/tasks/commands/{cmd_id}/logs']")
    page.wait_for_selector("#log:has-text('tasks-page-hello')", timeout=30_000)
    assert page.evaluate("window.__csp") == [], page.evaluate("window.__csp")

    # another user sees the row but is offered no Kill, and the master refuses them
    other = signed_in_context(browser, cluster.url, _other_user(cluster))
    theirs = other.new_page()
    theirs.goto(f"{cluster.url}/ui/#/tasks")
    theirs.wait_for_selector(f"#tasks tr[data-kind='command'][data-id='{cmd_id}']")
    assert theirs.locator(f"#tasks tr[data-id='{cmd_id}'] button[data-kill]").count() == 0
    refused = theirs.evaluate(f"""fetch('/ui/api/commands/{cmd_id}/kill',
        {{method: 'POST', headers: {{'X-Det-UI': '1'}}}}).then((r) => r.status)""")
    assert refused == 403, refused
    other.close()
    assert _state(cluster, cmd_id) == "RUNNING"

    # Kill from the page: the row turns TERMINATED and its Kill goes
    page.click("nav a[data-nav='tasks']")
    page.wait_for_selector("body[data-ready='#/tasks']")
    row.locator("button[data-kill]").click()
    page.wait_for_selector(f"#tasks tr[data-id='{cmd_id}'][data-state='TERMINATED']",
                           timeout=30_000)
    assert _state(cluster, cmd_id) == "TERMINATED"
    assert row.locator("button[data-kill]").count() == 0
    assert page.evaluate("window.__csp") == [], page.evaluate("window.__csp")
    assert not [e for e in errors if "Content Security Policy" in e], errors
    context.close()
