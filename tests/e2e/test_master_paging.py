"""Paged views of the master (issue 15): limit + cursor lists of experiments, trials, jobs
and checkpoints, bounded describe and metrics, and `det ... list` showing the newest page.

The fast tests run the master's real app in-process (FastAPI's TestClient) over a real
SQLite store filled straight through SQLite (``harness.master.fill_history``);
the slow ones drive a real master on 127.0.0.1 with the real `det` CLI.

This module's other half, the tests that start no process: tests/integration/test_master_paging.py.
"""

from __future__ import annotations

import json

import pytest

from harness.history import fill_history
from harness.master import Cluster

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral


def test_det_lists_show_every_row_or_the_newest_page(cluster: Cluster) -> None:
    fill_history(cluster.data_dir / "master.db", 45, trials_per_experiment=2, jobs=23)
    # Determined's `det e list`: every experiment, oldest first (--limit: a page's size)
    out = cluster.det("experiment", "list", "--limit", "20")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    ids = [int(line.split()[0]) for line in lines[1:]]
    assert ids == list(range(1, 46))  # all 45 over 3 pages, the newest at the bottom
    assert "2" in lines[1].split()  # TRIALS: the count from the summary

    every = cluster.det("experiment", "list", "--json")
    assert [e["id"] for e in json.loads(every.stdout)] == list(range(1, 46))
    page = json.loads(cluster.det("experiment", "list", "--pages", "1", "--limit", "5",
                                  "--offset", "40", "--json").stdout)
    assert [e["id"] for e in page] == [41, 42, 43, 44, 45]

    jobs = cluster.det("job", "batches")
    assert jobs.stdout.splitlines()[-1] == "showing the newest 20 of 23 jobs; --all for everything"
    assert len(json.loads(cluster.det("job", "batches", "--all", "--json").stdout)) == 23
    ckpts = cluster.det("checkpoint", "list", "--limit", "3")
    assert ckpts.stdout.splitlines()[-1].startswith("showing the newest 3 of 90 checkpoints")

    bad = cluster.det("experiment", "list", "--limit", "0")
    assert bad.returncode == 2 and "--limit" in bad.stderr and "at least 1" in bad.stderr

    (wide,) = fill_history(cluster.data_dir / "master.db", 1, trials_per_experiment=105)
    described = cluster.det("experiment", "describe", str(wide)).stdout.splitlines()
    assert "showing the first 100 of 105 trials; --all for everything" in described
    every_trial = json.loads(cluster.det("experiment", "describe", str(wide), "--all",
                                         "--json").stdout)["trials"]
    assert len({t["id"] for t in every_trial}) == 105

    # the same pages over HTTP from the master process
    with cluster.http() as http:
        page = http.get("/api/v1/experiments", params={"limit": 20}).json()
        assert page["total"] == 46 and [e["id"] for e in page["experiments"]] == list(
            range(46, 26, -1))
        assert http.get("/api/v1/experiments", params={"limit": 5000}).status_code == 400


def test_the_web_uis_list_loads_the_newest_page_then_more_on_request(cluster: Cluster) -> None:
    from harness.browser import missing_reason, open_browser, signed_in_context

    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    fill_history(cluster.data_dir / "master.db", 130, trials_per_experiment=1, name="ui")
    with cluster.http() as http:
        total = http.get("/api/v1/experiments", params={"limit": 1}).json()["total"]
    assert total > 130
    with open_browser() as browser:
        page = signed_in_context(browser, cluster.url, cluster.token).new_page()
        page.goto(f"{cluster.url}/ui/#/experiments")
        page.wait_for_function("document.body.dataset.ready === '#/experiments'")
        rows = page.locator("#experiments tbody tr")
        page.wait_for_function("document.querySelectorAll('#experiments tbody tr').length"
                               " === 100")
        ids = [int(i) for i in rows.evaluate_all("rs => rs.map(r => r.dataset.id)")]
        assert ids == list(range(total, total - 100, -1))  # the newest, newest first
        assert page.text_content("#exp-count") == (
            f"100 of the newest 100 of {total} experiments")
        page.click("#exp-more")
        page.wait_for_function("document.querySelectorAll('#experiments tbody tr').length"
                               f" === {min(200, total)}")
        assert page.is_hidden("#exp-more") == (total <= 200)
        page.context.close()
