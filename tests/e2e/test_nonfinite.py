"""NaN and infinities (issue 22, item 2): one wire encoding, one ranking rule, and a
diverging trial that COMPLETES.

The unit tests need no master; the end-to-end ones run real Keras trials on the module's
real master (the ``cluster`` fixture) and a real local run.

This module's other half, the tests that start no process: tests/unit/test_nonfinite.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.master import Cluster, create, describe
from tests.unit.test_nonfinite import _strict_jsonl

NAN, INF = math.nan, math.inf


DIVERGING_SCRIPT = '''\
import math
import numpy as np
import tensorflow as tf
import det_sdk as det

context = det.keras.init(hparams={"learning_rate": 1e6, "global_batch_size": 16})
hp = context.training.hparams
print("CONST", repr(hp.get("c_nan")), repr(hp.get("c_inf")), flush=True)
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x @ np.arange(1, 5, dtype="float32")[:, None]).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile(context.wrap_optimizer(tf.keras.optimizers.SGD(hp["learning_rate"])), "mse")
xs, ys = context.wrap_data(x, y)
xv, yv = context.wrap_data(x[:16], y[:16])
context.fit(model, x=xs, y=ys, batch_size=16, epochs=1, validation_data=(xv, yv), verbose=0)
'''


@pytest.fixture(scope="module")
def diverging_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = tmp_path_factory.mktemp("diverging_model")
    (model / "train.py").write_text(DIVERGING_SCRIPT)
    return model


def _finishes_completed(cluster: Cluster, exp_id: int) -> dict:
    out = cluster.det("experiment", "wait", str(exp_id), timeout=600)
    exp = describe(cluster, exp_id)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-2000:],
                                 [t.get("last_error") for t in exp["trials"]])
    assert exp["state"] == "COMPLETED"
    assert {t["state"] for t in exp["trials"]} == {"COMPLETED"}
    assert [t["restarts"] for t in exp["trials"]] == [0] * len(exp["trials"])
    return exp


@pytest.mark.stack_neutral  # the master ranks and stores; the local run below is the Keras side
def test_a_diverging_adaptive_asha_search_completes(
        cluster: Cluster, diverging_model: Path) -> None:
    """Three trials, two rungs; the 1e6 learning rate diverges to NaN. Every trial
    COMPLETES without a restart, the diverged one ranks last everywhere, and a constant
    .nan hyperparameter reaches the script as a float."""
    config = cluster.root / "diverging-asha.yaml"
    config.write_text(
        "name: diverging-asha\nentrypoint_script: python3 train.py\nmax_restarts: 2\n"
        "reproducibility: {experiment_seed: 1}\n"
        "hyperparameters:\n  global_batch_size: 16\n  c_nan: .nan\n"
        "  c_inf: {type: const, val: .inf}\n"
        "  learning_rate: {type: categorical, vals: [1.0e+6, 0.001, 0.01]}\n"
        "searcher: {name: adaptive_asha, metric: val_loss, max_length: {epochs: 2},\n"
        "           max_trials: 3, num_rungs: 2, divisor: 2, mode: aggressive}\n"
        "checkpoint_storage: {save_trial_best: 1, save_trial_latest: 1}\n")
    exp_id = create(cluster, config, diverging_model)
    exp = _finishes_completed(cluster, exp_id)
    trials = exp["trials"]
    assert len(trials) == 3
    diverged = [t for t in trials if t["hparams"]["learning_rate"] == 1e6]
    assert diverged, "the seed must draw the diverging learning rate"
    with cluster.http() as http:
        for t in diverged:
            rows = http.get(f"/api/v1/trials/{t['id']}/metrics").json()
            vals = [r["metrics"]["val_loss"] for r in rows if r["group"] == "validation"]
            assert vals and all(v in ("NaN", "Infinity") for v in vals), vals
            assert t["best_metric"] is None  # never the best
            assert t["rungs"][0]["metric"] in ("NaN", "Infinity")
            ckpt = http.get(f"/api/v1/trials/{t['id']}/checkpoints",
                            params={"best": "true"})
            assert ckpt.status_code == 200  # a best checkpoint, even if all are NaN
            # the UI's JSON (series, trial, experiment, curves) answers: a chart's gap (null)
            series = http.get(f"/ui/api/trials/{t['id']}/metrics",
                              params={"group": "validation", "max_points": 0})
            assert series.status_code == 200, series.text
            assert http.get(f"/ui/api/trials/{t['id']}").status_code == 200
        for path in (f"/ui/api/experiments/{exp_id}", f"/ui/api/experiments/{exp_id}/curves",
                     "/ui/api/experiments"):
            assert http.get(path).status_code == 200, path
        summary = http.get("/api/v1/experiments").json()["experiments"]
    finite = [t["best_metric"] for t in trials if t["best_metric"] is not None]
    assert finite and next(e for e in summary if e["id"] == exp_id)["best_metric"] == min(finite)
    # hparams as the wire form, and the constant reached the script as a float
    t0 = trials[0]
    out = cluster.det("trial", "describe", str(t0["id"]), "--json")
    assert out.returncode == 0, out.stderr
    hp = json.loads(out.stdout)["hparams"]
    assert (hp["c_nan"], hp["c_inf"]) == ("NaN", "Infinity")
    stored = exp["config"]["hyperparameters"]
    assert (stored["c_nan"]["val"], stored["c_inf"]["val"]) == ("NaN", "Infinity")
    logs = cluster.det("trial", "logs", str(t0["id"])).stdout
    assert "CONST nan inf" in logs, logs[-2000:]


@pytest.mark.stack_neutral
def test_a_diverging_single_trial_completes(cluster: Cluster, diverging_model: Path) -> None:
    config = cluster.write_config(
        "diverging-single", hyperparameters={"learning_rate": 1e6, "global_batch_size": 16},
        searcher={"name": "single", "metric": "val_loss", "max_length": {"epochs": 2}})
    exp = _finishes_completed(cluster, create(cluster, config, diverging_model))
    (t,) = exp["trials"]
    assert t["best_metric"] is None and t["steps_completed"] == 8


def test_a_diverging_local_run_finishes_and_has_a_best_checkpoint(
        tmp_path: Path, diverging_model: Path) -> None:
    from tests.support import run_python

    runs = tmp_path / "runs"
    proc = run_python(diverging_model / "train.py", {"DET_RUNS_DIR": str(runs)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _strict_jsonl(runs / "1" / "metrics.jsonl")
    assert [r["metrics"]["val_loss"] for r in rows if r["group"] == "validation"] in (
        ["NaN"], ["Infinity"])
    from det_sdk.session import LocalSession

    s = LocalSession.reopen(runs, 1, writer=False)
    assert s.checkpoint_for_trial(1, best=True) == s.read_checkpoints()[-1]["uuid"]
