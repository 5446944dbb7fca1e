"""Determined's Core API tutorials 0-3 on det_sdk's master, as their configs are written
(issue 29): only `import determined as det` becomes `import det_sdk as det`.

The scripts and configs in tests/core_api_tutorial are det_sdk's own, in the tutorials'
shape: 0 a plain loop, 1 metrics, 2 checkpoints and preemption (pause, then activate:
it continues from its checkpoint), 3 an ASHA hyperparameter search in both config eras
(Determined <= 0.37's unitless `max_length` through `searcher.operations()`, and 0.38's
`time_metric` + `max_time`, where a trial the searcher stops is told by preemption).

One real master runs each. That every config parses with nothing ignored is checked in
tests/unit/test_core_api_tutorials.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.master import Cluster, create, describe, wait_until

# Stack-neutral: the Core API tutorials train no Keras model.
pytestmark = pytest.mark.stack_neutral

TUTORIAL = Path(__file__).resolve().parents[1] / "core_api_tutorial"
# the ASHA configs: rungs at 5, 10 and 20 steps (max_length / max_time 20, divisor 2)
LADDER = [5, 10, 20]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tutorial directory, as the context directory `det experiment create` uploads."""
    dest = tmp_path_factory.mktemp("tutorial") / "core_api_tutorial"
    shutil.copytree(TUTORIAL, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _run(cluster: Cluster, model: Path, config: str) -> tuple[int, list[dict]]:
    exp = create(cluster, model / config, model)
    out = cluster.det("experiment", "wait", str(exp), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return exp, describe(cluster, exp)["trials"]


def _metrics(cluster: Cluster, trial_id: int, group: str) -> list[dict]:
    with cluster.http() as http:
        resp = http.get(f"/api/v1/trials/{trial_id}/metrics", params={"group": group})
    assert resp.status_code == 200, resp.text
    rows = resp.json()
    assert {r["group"] for r in rows} <= {group}
    return rows


def _trial_logs(cluster: Cluster, trial_id: int) -> str:
    out = cluster.det("trial", "logs", str(trial_id))
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_0_start_completes_without_restarts(cluster: Cluster, model: Path) -> None:
    exp, (trial,) = _run(cluster, model, "0_start.yaml")
    logs = _trial_logs(cluster, trial["id"])
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0, logs[-3000:]
    assert describe(cluster, exp)["state"] == "COMPLETED"
    # logging.basicConfig(format=det.LOG_FORMAT): level, [pid], logger name, message
    assert "root: x is now 10 after step 10" in logs and "INFO: [" in logs, logs[-3000:]


def test_1_metrics_are_stored_at_the_reported_steps(cluster: Cluster, model: Path) -> None:
    _, (trial,) = _run(cluster, model, "1_metrics.yaml")
    assert trial["state"] == "COMPLETED", _trial_logs(cluster, trial["id"])[-3000:]
    # x after n steps of increments 1, 2, ..., n
    training = _metrics(cluster, trial["id"], "training")
    assert [(r["steps_completed"], r["metrics"]) for r in training] == \
        [(n, {"x": n * (n + 1) // 2}) for n in range(1, 13)]
    validation = _metrics(cluster, trial["id"], "validation")
    assert [(r["steps_completed"], r["metrics"]) for r in validation] == \
        [(n, {"x": n * (n + 1) // 2}) for n in (4, 8, 12)]
    assert trial["steps_completed"] == 12


def _trial_row(cluster: Cluster, exp: int) -> dict:
    with cluster.http() as http:
        (row,) = http.get(f"/api/v1/experiments/{exp}/trials").json()["trials"]
    return row


def test_2_checkpoints_pause_then_activate_continues_from_the_checkpoint(
        cluster: Cluster, model: Path) -> None:
    exp = create(cluster, model / "2_checkpoints.yaml", model)
    wait_until("a few steps", lambda: _trial_row(cluster, exp)["steps_completed"] >= 3,
               timeout=120)
    assert cluster.det("experiment", "pause", str(exp)).returncode == 0
    wait_until("PAUSED", lambda: describe(cluster, exp)["state"] == "PAUSED", timeout=120,
               every=0.3)
    paused = _trial_row(cluster, exp)
    logs = _trial_logs(cluster, paused["id"])
    assert paused["state"] == "PAUSED", logs[-3000:]
    # it checkpointed where the pause found it: mid-run, listed by the master
    with cluster.http() as http:
        (ckpt,) = http.get(f"/api/v1/trials/{paused['id']}/checkpoints",
                           params={"latest": "true"}).json()
    at = ckpt["steps_completed"]
    assert 3 <= at < 30 and paused["latest_checkpoint"] == ckpt["uuid"], (ckpt, logs[-3000:])
    assert f"checkpoint {ckpt['uuid']} at step {at}" in logs, logs[-3000:]
    assert f"preempted after step {at}" in logs, logs[-3000:]

    assert cluster.det("experiment", "activate", str(exp)).returncode == 0
    out = cluster.det("experiment", "wait", str(exp), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (trial,) = describe(cluster, exp)["trials"]
    logs = _trial_logs(cluster, trial["id"])
    assert trial["state"] == "COMPLETED" and trial["steps_completed"] == 30, logs[-3000:]
    # the second run restored the checkpoint: steps and x went on from there, once
    assert logs.count("resuming from step") == 1, logs[-3000:]
    assert f"resuming from step {at} with x={at}" in logs, logs[-3000:]
    training = _metrics(cluster, trial["id"], "training")
    assert [(r["steps_completed"], r["metrics"]["x"]) for r in training] == \
        [(n, n) for n in range(1, 31)]
    (validation,) = _metrics(cluster, trial["id"], "validation")
    assert (validation["steps_completed"], validation["metrics"]) == (30, {"x": 30})


def _hps(trials: list[dict]) -> dict[int, dict]:
    by_hp: dict[int, dict] = {}
    for t in trials:
        by_hp.setdefault(t["hparams"]["increment_by"], t)
    return by_hp


def test_3_hpsearch_old_era_asha_through_searcher_operations(
        cluster: Cluster, model: Path) -> None:
    """Unitless max_length 20: the script is told 5, then 10, then 20 steps (op.length)
    while it stays in the top half; seed 7 draws increment_by 6, 3, 7, 1."""
    exp, trials = _run(cluster, model, "3_hpsearch_old.yaml")
    assert describe(cluster, exp)["state"] == "COMPLETED"
    assert len(trials) == 4 and {t["state"] for t in trials} == {"COMPLETED"}, trials
    by_hp = _hps(trials)
    assert sorted(by_hp) == [1, 3, 6, 7]
    # every trial stopped at a rung it reached, with its validation at each rung it trained to
    for t in trials:
        assert t["steps_completed"] in LADDER, t
        validation = _metrics(cluster, t["id"], "validation")
        steps = [r["steps_completed"] for r in validation]
        assert steps == LADDER[:LADDER.index(t["steps_completed"]) + 1], (t, validation)
        assert [r["metrics"]["x"] for r in validation] == \
            [n * t["hparams"]["increment_by"] for n in steps]
    # the best (1) goes on at every rung; 7 starts when a slot frees, after two better
    # trials reached the first rung: the searcher stops it there
    assert by_hp[1]["steps_completed"] == 20 and len(by_hp[1]["rungs"]) == 2
    assert by_hp[7]["steps_completed"] == 5
    assert by_hp[7]["rungs"][0]["promoted"] is False
    assert len({t["steps_completed"] for t in trials}) > 1


def test_3_hpsearch_038_time_metric_stops_trials_through_preemption(
        cluster: Cluster, model: Path) -> None:
    """time_metric: batches, max_time: 20: the script trains to 20 batches unless
    should_preempt() says the searcher stopped it; stopped trials end COMPLETED."""
    exp, trials = _run(cluster, model, "3_hpsearch_new.yaml")
    assert describe(cluster, exp)["state"] == "COMPLETED"
    assert len(trials) == 4 and {t["state"] for t in trials} == {"COMPLETED"}, trials
    by_hp = _hps(trials)
    assert sorted(by_hp) == [1, 3, 6, 7]
    for t in trials:
        rungs = [r["rung"] for r in t["rungs"]]
        assert rungs == list(range(len(rungs))), t  # the reported `batches` placed it
        if t["steps_completed"] < 20:  # the searcher stopped it at a rung: it was told
            logs = _trial_logs(cluster, t["id"])
            assert f"stopped after {t['steps_completed']} batches" in logs, logs[-3000:]
            assert t["rungs"] and t["rungs"][-1]["promoted"] is False, t
            assert all(r["promoted"] for r in t["rungs"][:-1]), t
        else:
            assert rungs == [0, 1] and all(r["promoted"] for r in t["rungs"]), t
    assert by_hp[1]["steps_completed"] == 20
    worst = by_hp[7]
    assert worst["steps_completed"] < 20 and worst["rungs"][0]["promoted"] is False, worst
