"""Nothing lost (issue 37), end to end: a damaged checkpoint falls back to an intact one,
a refused metrics report fails its trial, a job's files outlive it, the CLI packs with
bounded memory and prints what the master holds with control characters escaped.

A real master on 127.0.0.1 (one for the module), the real `det` CLI, TensorFlow-free
scripts (tests/nothing_lost).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.master import Cluster, create, describe, wait_until

SCRIPTS = Path(__file__).resolve().parents[1] / "nothing_lost"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("nothing_lost") / "model"
    shutil.copytree(SCRIPTS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _finished(cluster: Cluster, exp: int) -> dict:
    wait_until("the experiment to end",
               lambda: describe(cluster, exp)["state"] in ("COMPLETED", "ERROR", "CANCELED"),
               timeout=240)
    return describe(cluster, exp)


def test_a_damaged_checkpoint_is_marked_and_the_trial_falls_back(
        cluster: Cluster, model: Path) -> None:
    exp = create(cluster, model / "damaged.yaml", model)
    info = _finished(cluster, exp)
    (trial,) = info["trials"]
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    # crash, then one restore of the damaged one, then the intact one: not max_restarts
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 2, logs[-3000:]
    assert "resumed from step 1" in logs
    assert logs.count("CheckpointCorruptError: ") == 1, logs[-3000:]
    with cluster.http() as http:
        ckpts = http.get(f"/api/v1/trials/{trial['id']}/checkpoints").json()
    damaged = [c for c in ckpts if c["damaged"]]
    (intact,) = [c for c in ckpts if not c["damaged"]]
    assert len(damaged) == 1 and damaged[0]["steps_completed"] == 2
    assert intact["steps_completed"] == 1 and trial["latest_checkpoint"] == intact["uuid"]
    note = f"checkpoint {damaged[0]['uuid']} failed verification on restore"
    assert note in logs and f"resumes from checkpoint {intact['uuid']}" in logs
    assert note in cluster.det("trial", "describe", str(trial["id"])).stdout
    assert note in cluster.det("experiment", "describe", str(exp)).stdout


@pytest.mark.parametrize("how", ["many", "refused"])
def test_metrics_the_master_cannot_store_fail_the_trial(
        cluster: Cluster, model: Path, how: str) -> None:
    """Over the limit: refused in the script before sending. Refused by the master (a
    step past 2**53): the trial fails with the master's reason, not a warning."""
    config = model / f"metrics-{how}.yaml"
    config.write_text((model / "metrics.yaml").read_text().replace(
        "metrics.py many", f"metrics.py {how}"))
    exp = create(cluster, config, model)
    (trial,) = _finished(cluster, exp)["trials"]
    assert trial["state"] == "ERROR", trial
    if how == "many":
        assert "MetricsLimitError: a training metrics report has 1001 metrics; the master " \
               "stores at most 1000" in trial["last_error"]
        assert "trained on" not in trial["last_error"]
    else:
        assert "ReportRefusedError: the master refused a metrics report as invalid " \
               "(HTTP 400)" in trial["last_error"], trial["last_error"]
        assert "steps_completed" in trial["last_error"]
