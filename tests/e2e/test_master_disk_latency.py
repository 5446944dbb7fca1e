"""Issue 46: the master's answers stay fast while its disk work (keeping an ended task's
files, deleting checkpoints) runs.

In-process over the real app and store, as tests/integration/test_master_disk_work.py
(its Cluster plays the launcher's part); here because it starts a heartbeat process.

Counts are under a tenth of the issue's attack (3,000 files kept, two checkpoints of 1,000
files deleted): the bound is on answers *during* the work, whatever its length; the test
checks the work lasted long enough (several times the bound) for the answers to overlap
it, so that the old code (the copy under the lock the checkpoint report takes on the
event loop; rmtree on the event loop: one answer waits for all of it) fails it.

The bound is 100 ms over the p99 of the same answers measured idle just before and just
after: on a shared CI machine (2 cores, load 10) the idle p99 alone was 64 ms, and a
bound that the machine's load can break would make the test fail under load and pass
alone. For the same reason an answer's time excludes what a stall of the whole machine
took from it, as a heartbeat in a separate process sees it (tests.heartbeat): round 6's
CI saw one answer of 52 s, over all of a 52.9 s run whose work takes 5-10 s here, and
under CPU and disk load here no answer passed 0.4 s. A master that blocks its loop or
holds a lock over the work stalls its answers, never the heartbeat.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from tests.heartbeat import Heartbeat

# and its fixture, ``cluster``
from tests.integration.test_master_disk_work import Cluster, cluster_fixture  # noqa: F401

# Stack-neutral: this module tests the master; no Keras.
pytestmark = pytest.mark.stack_neutral

KEPT_FILES = 3_000
CHECKPOINT_FILES = 1_000
BOUND_S = 0.100


def _p99(latencies: list[float]) -> float:
    """The 99th percentile; the worst of fewer than 100 (a blocked loop answers few)."""
    ordered = sorted(latencies)
    return ordered[int(len(ordered) * 0.99) - 1] if len(ordered) >= 100 else ordered[-1]


def _latencies(cluster: Cluster, alloc: dict[str, Any], metrics: str, n: int,
               first_step: int) -> list[tuple[float, float]]:
    """``n`` rounds of ``/health`` and a metric report: each answer's start and end."""
    out = []
    for step in range(first_step, first_step + n):
        t0 = time.monotonic()
        assert cluster.http.get("/health").status_code == 200
        t1 = time.monotonic()
        r = cluster.post(metrics, token=alloc["token"], json={
            "group": "training", "steps_completed": step + 1, "epoch": 0,
            "metrics": {"loss": 1.0}})
        assert r.status_code == 204, r.text
        out += [(t0, t1), (t1, time.monotonic())]
    return out


def test_answers_stay_fast_while_files_are_kept_and_checkpoints_deleted(
        cluster: Cluster) -> None:
    job_id, job_alloc = cluster.job_that_wrote(KEPT_FILES)
    trial, alloc = cluster.running_trial()
    uuids = [cluster.checkpoint(trial, alloc, CHECKPOINT_FILES) for _ in range(2)]
    uuids.append(cluster.checkpoint(trial, alloc, 1))
    assert cluster.report_checkpoint(trial, alloc, uuids[0]).status_code == 204
    metrics = f"/api/v1/trials/{trial}/metrics"

    def work() -> None:
        for uuid in uuids[1:]:  # each drops the one before: 2,000 files deleted each
            assert cluster.report_checkpoint(trial, alloc, uuid).status_code == 204

    with Heartbeat() as beat:
        idle = _latencies(cluster, alloc, metrics, 100, 0)  # the machine's own, just before
        started = time.monotonic()
        threads = [threading.Thread(target=cluster.exit, args=(job_alloc, 0)),
                   threading.Thread(target=work)]
        for t in threads:
            t.start()
        answers, step = [], 1000
        while any(t.is_alive() for t in threads) or not cluster.master.wait_disk_work(0):
            answers += _latencies(cluster, alloc, metrics, 1, step)
            step += 1
        took = time.monotonic() - started
        for t in threads:
            t.join()
        idle += _latencies(cluster, alloc, metrics, 100, step)  # and just after: load drifts
    # the master's part of each answer: less what a stall of the whole machine took
    latencies = [t1 - t0 - beat.stalled(t0, t1) for t0, t1 in answers]
    idle_p99 = _p99([t1 - t0 - beat.stalled(t0, t1) for t0, t1 in idle])
    p99 = _p99(latencies)
    assert took > 3 * BOUND_S, f"the disk work took {took:.2f} s: too short to measure"
    assert p99 < BOUND_S + idle_p99, (
        f"p99 {p99 * 1000:.0f} ms over {len(latencies)} answers while the disk work took "
        f"{took:.1f} s (worst {max(latencies) * 1000:.0f} ms; idle p99 "
        f"{idle_p99 * 1000:.0f} ms; the machine's longest stall "
        f"{beat.worst_gap() * 1000:.0f} ms, not counted)")
    # and the work was done: the files kept whole, the dropped checkpoints gone
    assert len(os.listdir(cluster.master.files_path("jobs", job_id) / "out")) == \
        KEPT_FILES - 1
    storage = cluster.root / "storage"
    assert sorted(os.listdir(storage)) == [uuids[2]]
