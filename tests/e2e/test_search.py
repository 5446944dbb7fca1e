"""Hyperparameter search: grid, random and adaptive ASHA, in the master and end to end.

The searcher tests in tests/integration drive a real ``Master`` (real SQLite file) in
their process, without launching trials; those in tests/e2e run real trials on a real
master.

This module's other half, the tests that start no process: tests/integration/test_search.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from harness.master import Cluster, create, describe, wait_until
from tests.integration.test_search import ASHA, NESTED

# Stack-neutral: the searchers live in the master; Keras trials are only the workload.
pytestmark = pytest.mark.stack_neutral


def _config(cluster: Cluster, name: str, **fields: object) -> Path:
    config = {"name": name, "entrypoint_script": "true", **fields}
    path = cluster.root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_grid_creates_exactly_the_product(cluster: Cluster) -> None:
    config = _config(cluster, "grid", searcher={"name": "grid", "metric": "val_loss"},
                     hyperparameters={
                         "layers": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
                         "act": {"type": "categorical", "vals": ["relu", "tanh"]},
                         "lr": {"type": "log", "base": 10, "minval": -3, "maxval": -1,
                                "count": 3},
                         "batch": 32})
    trials = describe(cluster, create(cluster, config))["trials"]
    got = sorted((t["hparams"]["layers"], t["hparams"]["act"], round(t["hparams"]["lr"], 9),
                  t["hparams"]["batch"]) for t in trials)
    assert got == sorted((n, a, lr, 32) for n in (1, 2, 3) for a in ("relu", "tanh")
                         for lr in (0.001, 0.01, 0.1))


def test_random_with_the_same_seed_creates_the_same_trials(cluster: Cluster) -> None:
    def hparams(seed: int) -> list[dict]:
        config = _config(cluster, f"random-{seed}", searcher={
            "name": "random", "metric": "val_loss", "max_trials": 5},
            hyperparameters={"lr": {"type": "double", "minval": 0, "maxval": 1},
                             "units": {"type": "int", "minval": 1, "maxval": 1000}},
            reproducibility={"experiment_seed": seed})
        trials = describe(cluster, create(cluster, config))["trials"]
        assert len(trials) == 5
        return [t["hparams"] for t in trials]

    first = hparams(11)
    assert hparams(11) == first
    assert hparams(12) != first
    assert len({json.dumps(h, sort_keys=True) for h in first}) == 5


def test_asha_stops_the_lower_half_and_survives_a_master_restart(cluster: Cluster) -> None:
    """8 real trials, rungs of 1, 2 and 4 epochs, divisor 2; the master is killed mid-search."""
    config = cluster.write_config(
        "asha", searcher=ASHA, reproducibility={"experiment_seed": 3},
        hyperparameters={"learning_rate": 0.05, "global_batch_size": 16,
                         "handicap": {"type": "double", "minval": 0, "maxval": 10}})
    exp_id = create(cluster, config)
    wait_until("3 rung results", lambda: sum(
        len(t["rungs"]) for t in describe(cluster, exp_id)["trials"]) >= 3, timeout=300)
    os.kill(int((cluster.data_dir / "master.pid").read_text()), 9)
    time.sleep(2)
    cluster.up()
    assert cluster.det("experiment", "wait", str(exp_id), timeout=600).returncode == 0
    exp = describe(cluster, exp_id)
    trials = exp["trials"]
    assert len(trials) == 8 and {t["state"] for t in trials} == {"COMPLETED"}

    steps_per_epoch = 10  # 160 rows, batches of 16
    rung_epochs = [1, 2, 4]
    arrivals = []
    with cluster.http() as http:
        for t in trials:
            rows = http.get(f"/api/v1/trials/{t['id']}/metrics").json()
            keys = [(r["group"], r["steps_completed"]) for r in rows]
            assert len(keys) == len(set(keys))  # one value per step, restart or not
            val = {r["steps_completed"]: r["metrics"]["val_handicapped_loss"]
                   for r in rows if r["group"] == "validation"}
            for r in t["rungs"]:
                # the searcher decided on the metric the trial reported at that length
                assert r["metric"] == pytest.approx(val[rung_epochs[r["rung"]] * steps_per_epoch])
                arrivals.append((r["order"], r["rung"], t["id"], r["metric"], r["promoted"]))
            reached = max((r["rung"] + r["promoted"] for r in t["rungs"]), default=0)
            assert t["steps_completed"] == rung_epochs[reached] * steps_per_epoch
    # replay: each decision is "in the top max(1, n // 2) of the rung's results so far"
    seen: dict[int, list[float]] = {}
    for _, rung, _tid, metric, promoted in sorted(arrivals):
        seen.setdefault(rung, []).append(metric)
        better = sum(m < metric for m in seen[rung])
        assert promoted == (rung < 2 and better < max(1, len(seen[rung]) // 2))
    assert len([a for a in arrivals if a[1] == 0]) == 8  # every trial reported rung 0
    assert any(not a[4] for a in arrivals if a[1] == 0)  # and some stopped there
    total = sum(t["steps_completed"] for t in trials)
    assert total < 8 * 4 * steps_per_epoch
    best = min(trials, key=lambda t: t["hparams"]["handicap"])
    assert best["steps_completed"] == 4 * steps_per_epoch  # the best one went the distance


def test_a_searcher_metric_the_trial_does_not_report_is_a_clear_error(cluster: Cluster) -> None:
    config = cluster.write_config("bad-metric", max_restarts=0, searcher={
        "name": "single", "metric": "val_nope", "max_length": {"epochs": 1}})
    exp_id = create(cluster, config)
    assert cluster.det("experiment", "wait", str(exp_id)).returncode == 1
    (trial,) = describe(cluster, exp_id)["trials"]
    assert trial["state"] == "ERROR"
    assert "searcher.metric: 'val_nope' is not among the validation metrics" in \
        trial["last_error"]
    assert "val_loss" in trial["last_error"]  # it names the ones there are


NESTED_SCRIPT = '''\
import json, os
import det_sdk as det

with det.core.init() as core:
    hp = core.hparams
    opt = hp["optimizer"]
    print("NESTED " + json.dumps({
        "learning_rate": opt["learning_rate"], "name": opt["name"],
        "momentum": opt["momentum"], "units": hp["layers"]["dense"]["units"],
        "group_is_dict": isinstance(opt, dict),
        "env": json.loads(os.environ["DET_HPARAMS"])}), flush=True)
    core.train.report_validation_metrics(
        steps_completed=1, metrics={"val_loss": opt["learning_rate"]})
    core.train.report_progress(1.0)
'''


def test_a_nested_random_search_gives_each_trial_script_its_nested_values(
        cluster: Cluster, tmp_path: Path) -> None:
    """Issue 23: Determined's nested hyperparameters, on the real master end to end."""
    model = tmp_path / "nested_model"
    model.mkdir()
    (model / "train.py").write_text(NESTED_SCRIPT)
    config = _config(cluster, "nested", entrypoint_script="python3 train.py",
                     searcher={"name": "random", "metric": "val_loss", "max_trials": 3},
                     hyperparameters=NESTED, reproducibility={"experiment_seed": 4},
                     max_restarts=0)
    exp_id = create(cluster, config, model)
    assert cluster.det("experiment", "wait", str(exp_id), timeout=300).returncode == 0
    trials = describe(cluster, exp_id)["trials"]
    assert len(trials) == 3 and {t["state"] for t in trials} == {"COMPLETED"}
    assert len({t["hparams"]["optimizer"]["learning_rate"] for t in trials}) == 3
    for t in trials:
        out = cluster.det("trial", "describe", str(t["id"]), "--json")
        hp = json.loads(out.stdout)["hparams"]
        assert hp == t["hparams"]
        assert 1e-4 <= hp["optimizer"]["learning_rate"] <= 0.1
        assert 16 <= hp["layers"]["dense"]["units"] <= 64
        logs = cluster.det("trial", "logs", str(t["id"])).stdout
        line = next(ln for ln in logs.splitlines() if "NESTED " in ln)
        seen = json.loads(line.split("NESTED ", 1)[1])
        assert seen == {"learning_rate": hp["optimizer"]["learning_rate"],
                        "name": hp["optimizer"]["name"], "momentum": 0.9,
                        "units": hp["layers"]["dense"]["units"], "group_is_dict": True,
                        "env": hp}
        assert t["best_metric"] == pytest.approx(hp["optimizer"]["learning_rate"])
        # the text describe shows the leaves by dotted name
        text = cluster.det("trial", "describe", str(t["id"])).stdout
        assert f"layers.dense.units={hp['layers']['dense']['units']}" in text
        assert f"optimizer.name={hp['optimizer']['name']}" in text


# Written from the shape of Determined's core_api tutorial 3_hpsearch (0.38): LOG_FORMAT,
# get_cluster_info, a loop that reports the time metric `batches` with each validation and
# checks preempt.should_preempt(); it never calls searcher.operations().
CORE_038 = """\
import logging, time
import det_sdk as det

logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
info = det.get_cluster_info()
increment_by = info.trial.hparams["increment_by"]
with det.core.init() as core_context:
    x = 0.0
    for batch in range(100):
        x += increment_by
        steps = batch + 1
        time.sleep(0.05)
        if steps % 10 == 0:
            core_context.train.report_training_metrics(steps_completed=steps, metrics={"x": x})
            core_context.train.report_progress(steps / 100)
            core_context.train.report_validation_metrics(
                steps_completed=steps, metrics={"x": x, "batches": steps})
            if core_context.preempt.should_preempt():
                logging.info("stopped by the searcher at %s", steps)
                break
"""


# The older era's shape (1_metrics .. 3_hpsearch before 0.38): a unitless max_length that
# the script counts in batches through searcher.operations().
CORE_OPS = """\
import logging
import det_sdk as det

logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
with det.core.init() as core_context:
    x, batch = 0, 0
    for op in core_context.searcher.operations():
        while batch < op.length:
            x += 1
            batch += 1
            if batch % 25 == 0:
                core_context.train.report_training_metrics(steps_completed=batch,
                                                           metrics={"x": x})
                op.report_progress(batch)
        core_context.train.report_validation_metrics(
            steps_completed=batch, metrics={"x": x, "op_length": op.length})
        op.report_completed(x)
"""


def _core_model(tmp_path: Path, name: str, script: str) -> Path:
    model = tmp_path / name
    model.mkdir()
    (model / "train.py").write_text(script)
    return model


def test_core_api_038_asha_time_metric_stops_trials_through_preemption(
        cluster: Cluster, tmp_path: Path) -> None:
    """time_metric: batches + max_time: 100, rungs at 25, 50, 100 batches (divisor 2): the
    searcher places each trial by its reported `batches`; the ones it stops see
    should_preempt() and end COMPLETED, short of 100 batches."""
    config = cluster.write_config(
        "core038", entrypoint_script="python3 train.py", max_restarts=0,
        reproducibility={"experiment_seed": 3},
        hyperparameters={"increment_by": {"type": "double", "minval": 1, "maxval": 8}},
        searcher={"name": "adaptive_asha", "metric": "x", "max_trials": 4,
                  "time_metric": "batches", "max_time": 100, "divisor": 2, "num_rungs": 3,
                  "mode": "aggressive"})
    exp_id = create(cluster, config, _core_model(tmp_path, "core038", CORE_038))
    out = cluster.det("e", "wait", str(exp_id), timeout=600)  # Determined's alias
    assert out.returncode == 0, out.stdout + out.stderr
    trials = describe(cluster, exp_id)["trials"]
    assert len(trials) == 4 and {t["state"] for t in trials} == {"COMPLETED"}
    ladder = [25, 50, 100]
    arrivals = []
    for t in trials:
        for r in t["rungs"]:
            arrivals.append((r["order"], r["rung"], r["metric"], r["promoted"]))
        stopped = [r for r in t["rungs"] if not r["promoted"]]
        if stopped:  # told through preemption: it ended before the next rung
            assert t["steps_completed"] < ladder[stopped[0]["rung"] + 1], t
        else:
            assert t["steps_completed"] == 100, t
    seen: dict[int, list[float]] = {}
    for _, rung, metric, promoted in sorted(arrivals):
        seen.setdefault(rung, []).append(metric)
        better = sum(m < metric for m in seen[rung])
        assert promoted == (better < max(1, len(seen[rung]) // 2))
    # seed 3 draws increment_by 2.67, 4.81, 3.59, 5.23: trial 4, the worst, starts after a
    # slot frees (2 slots), so it never arrives first at rung 0 and is stopped there
    worst = max(trials, key=lambda t: t["hparams"]["increment_by"])
    assert worst["rungs"][0]["promoted"] is False and worst["steps_completed"] < 100
    best = min(trials, key=lambda t: t["hparams"]["increment_by"])
    assert best["steps_completed"] == 100 and len(best["rungs"]) == 2


def test_core_api_unitless_max_length_reaches_the_script_as_an_integer(
        cluster: Cluster, tmp_path: Path) -> None:
    config = cluster.write_config(
        "coreops", entrypoint_script="python3 train.py", max_restarts=0,
        hyperparameters={}, searcher={"name": "single", "metric": "x", "max_length": 100})
    exp_id = create(cluster, config, _core_model(tmp_path, "coreops", CORE_OPS))
    host_port = cluster.url.removeprefix("http://")  # det -m host:port, Determined's habit
    out = cluster.det("-m", host_port, "e", "wait", str(exp_id), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    (trial,) = describe(cluster, exp_id)["trials"]
    assert trial["state"] == "COMPLETED" and trial["steps_completed"] == 100
    with cluster.http() as http:
        rows = http.get(f"/api/v1/trials/{trial['id']}/metrics").json()
    (val,) = [r for r in rows if r["group"] == "validation"]
    assert val["metrics"] == {"x": 100, "op_length": 100}
