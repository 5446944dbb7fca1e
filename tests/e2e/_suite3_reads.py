"""Reads of a master's state that the cluster tests make in their own process (over the
master's API, with :func:`harness.master.api`'s one client), in place of a `det` process
per read where the read is not the subject of the test: each `det` costs about 0.3 s of
CPU (its start-up), and on 2 cores polls through it slowed the very trials being waited for.
The CLI's own listings, logs and describe have their tests (test_cli_determined.py,
test_master_lifecycle.py, test_master_paging.py).

(They need a running master, so their examples are not run as doctests)::

    before = experiment_count(cluster)
"""

from __future__ import annotations

from typing import Any

from harness.master import Cluster, api


def experiment_count(cluster: Cluster) -> int:
    """How many experiments the master has (archived ones too): what the length of `det
    experiment list --all --json` says."""
    r = api(cluster).get("/api/v1/experiments", params={"limit": 1})
    assert r.status_code == 200, r.text
    return int(r.json()["total"])


def checkpoints(cluster: Cluster, trial_id: int | None = None) -> list[dict[str, Any]]:
    """The master's checkpoints (of one trial, or every one): `det checkpoint list`'s rows."""
    if trial_id is not None:
        r = api(cluster).get(f"/api/v1/trials/{trial_id}/checkpoints")
        assert r.status_code == 200, r.text
        return list(r.json())
    r = api(cluster).get("/api/v1/checkpoints", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return list(r.json()["checkpoints"])
