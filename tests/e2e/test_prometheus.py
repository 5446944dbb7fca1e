"""The Prometheus scrape (issue 60): ``/prom/det-state-metrics`` on a real master, read as
Prometheus reads it (the user's bearer token) and parsed by prometheus_client's own text
parser: slots, the queue, experiments, trials and jobs by state, as they change."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.master import Cluster, api, wait_until
from tests.lifecycle_harness import Fakes

# Stack-neutral: the master, the CLI and the UI; no Keras in these runs
pytestmark = pytest.mark.stack_neutral

PATH = "/prom/det-state-metrics"


def scrape(cluster: Cluster) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, labels) -> value."""
    r = api(cluster).get(PATH)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(r.text):
        assert family.type == "gauge", family
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_scrape_counts_slots_queue_and_states(cluster: Cluster, fakes: Fakes) -> None:
    before = scrape(cluster)
    assert value(before, "det_slots_total") == 2
    assert value(before, "det_slots_used") == 0
    assert value(before, "det_trials", state="RUNNING") == 0
    assert value(before, "det_experiments", state="ACTIVE") == 0
    assert value(before, "det_jobs", state="QUEUED") == 0
    assert value(before, "det_queue_length", kind="trial") == 0

    # three one-slot trials on a two-slot master: two run, one waits in the queue
    exps = [fakes.create() for _ in range(3)]

    def busy() -> dict[Any, float] | None:
        now = scrape(cluster)
        return now if value(now, "det_trials", state="RUNNING") == 2 else None

    now = wait_until("two trials to run", busy, timeout=120)
    assert value(now, "det_slots_used") == 2
    assert value(now, "det_experiments", state="ACTIVE") == 3
    assert value(now, "det_trials", state="QUEUED") == 1
    assert value(now, "det_queue_length", kind="trial") == 1
    # a running task's own token may not scrape: the user's only (outside /api/ a task's
    # token is not a token at all, as for the web UI's data: 401)
    task_token = next(a["token"] for a in fakes.allocations() if a["state"] == "RUNNING")
    with cluster.http(token=task_token) as task:
        assert task.get(PATH).status_code == 401

    for exp in exps:
        fakes.command(exp, "kill")

    def ended() -> dict[Any, float] | None:
        now = scrape(cluster)
        return now if value(now, "det_experiments", state="CANCELED") == 3 else None

    after = wait_until("the three to end", ended, timeout=120)
    assert value(after, "det_slots_used") == 0
    assert value(after, "det_trials", state="RUNNING") == 0
    assert value(after, "det_queue_length", kind="trial") == 0


def test_a_scrape_needs_the_users_token(cluster: Cluster) -> None:
    with cluster.http(token=None) as anonymous:
        assert anonymous.get(PATH).status_code == 401
    with cluster.http(token="not-a-token") as wrong:
        assert wrong.get(PATH).status_code == 401
