"""NaN and infinities (issue 22, item 2): one wire encoding, one ranking rule, and a
diverging trial that COMPLETES.

The unit tests at the top need no master; the slow ones run real Keras trials on the
module's real master (the ``cluster`` fixture) and a real local run.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from det_sdk import api
from det_sdk.config import load_yaml_text, parse_experiment_config
from det_sdk.master.searchers import initial_trials, promotes
from det_sdk.master.store import Store
from det_sdk.storage import best_first
from det_sdk.wire import decode_metrics, dumps, metric_rank
from harness.master import Cluster, create, describe

NAN, INF = math.nan, math.inf


# --- the encoder ----------------------------------------------------------------------------

def test_dumps_writes_standard_json_for_every_non_finite_value() -> None:
    body = {"searcher_metric": NAN, "metrics": {"a": INF, "b": -INF, "c": np.float32("nan"),
                                                "d": np.float64(0.25), "e": 2},
            "list": [1.5, (NAN,)], "flag": True, "none": None}
    text = dumps(body)
    assert "NaN" not in text.replace('"NaN"', "")  # no bare literal: any JSON reader takes it
    out = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert out == {"searcher_metric": "NaN",
                   "metrics": {"a": "Infinity", "b": "-Infinity", "c": "NaN", "d": 0.25,
                               "e": 2},
                   "list": [1.5, ["NaN"]], "flag": True, "none": None}
    with pytest.raises(TypeError):
        dumps({"x": object()})  # what JSON cannot hold at all is still refused


def test_the_masters_models_read_the_wire_form_back_as_floats() -> None:
    op = api.CompletedOperation.model_validate_json(
        dumps({"unit": "epochs", "length": 1, "searcher_metric": NAN}))
    assert math.isnan(op.searcher_metric)
    report = api.MetricsReport.model_validate_json(dumps(
        {"group": "validation", "steps_completed": 3, "metrics": {"l": -INF, "a": 0.5}}))
    assert report.metrics == {"l": -INF, "a": 0.5}
    # and answers in it: metrics, and floats of untyped fields (hparams, config)
    info = api.TrialInfo(id=1, experiment_id=1, state="COMPLETED", seed=0,
                         hparams={"c": NAN, "g": {"v": [INF, 1.0]}, "s": "NaN"},
                         best_metric=None, rungs=[{"rung": 0, "metric": INF,
                                                   "promoted": False, "order": 0}])
    out = json.loads(info.model_dump_json())
    assert out["hparams"] == {"c": "NaN", "g": {"v": ["Infinity", 1.0]}, "s": "NaN"}
    assert out["rungs"][0]["metric"] == "Infinity"
    assert decode_metrics({"l": "NaN", "x": "text", "n": 1})["x"] == "text"


# --- the ranking rule ---------------------------------------------------------------------

@pytest.mark.parametrize("smaller", [True, False])
def test_a_non_finite_metric_ranks_worst_in_both_directions(smaller: bool) -> None:
    values = [NAN, 0.3, INF, 0.1, -INF, 0.2]
    ranked = sorted(values, key=lambda v: metric_rank(v, smaller))
    finite = sorted([0.1, 0.2, 0.3], reverse=not smaller)
    assert ranked[:3] == finite
    assert all(not math.isfinite(v) for v in ranked[3:])
    # ASHA: against one finite result, every non-finite one stops (divisor 2: 1 goes on)
    for bad in (NAN, INF, -INF):
        assert promotes([(1, 0.5), (2, bad)], 2, divisor=2, smaller_is_better=smaller) is False
        assert promotes([(2, bad), (1, 0.5)], 1, divisor=2, smaller_is_better=smaller) is True
    # best checkpoint and retention: finite ones first, non-finite after, none dropped
    rows = [{"uuid": str(i), "metrics": {"m": v}} for i, v in enumerate(values)]
    order = [r["uuid"] for r in best_first(rows, "m", smaller)]
    assert order[:3] == (["3", "5", "1"] if smaller else ["1", "5", "3"])
    assert sorted(order[3:]) == ["0", "2", "4"]


def test_best_metric_and_best_trials_never_pick_a_non_finite_value(tmp_path: Path) -> None:
    for smaller in (True, False):
        s = Store(tmp_path / f"m{smaller}.db")
        exp = s.create_experiment_with_trials({}, "a", [
            {"hparams": {}, "seed": 0, "bracket": 0, "target": None}] * 4)
        ids = [t["id"] for t in s.trials(exp)]
        s.record_metrics(ids[0], "validation", 1, 1, {"m": INF}, INF, smaller)
        s.record_metrics(ids[1], "validation", 1, 1, {"m": -INF}, -INF, smaller)
        s.record_metrics(ids[2], "validation", 1, 1, {"m": NAN}, NAN, smaller)
        s.record_metrics(ids[3], "validation", 1, 1, {"m": 0.7}, 0.7, smaller)
        s.record_metrics(ids[3], "validation", 2, 1, {"m": NAN}, NAN, smaller)
        assert [s.trial(i)["best_metric"] for i in ids] == [None, None, None, 0.7]
        best, total = s.best_trials(exp, 1, smaller)
        assert best == [ids[3]] and total == 4
        rows, _ = s.experiment_page(None, 10)
        assert (rows[0]["best_min"], rows[0]["best_max"]) == (0.7, 0.7)
        assert s.metrics(ids[0])[0]["metrics"] == {"m": INF}  # stored and read back as is


# --- a constant hyperparameter .nan / .inf ----------------------------------------------

CONST_YAML = """\
entrypoint_script: python3 train.py
hyperparameters:
  c_nan: .nan
  c_inf: {type: const, val: -.inf}
  pick: {type: categorical, vals: [.inf, "NaN"]}
searcher: {name: grid, metric: val_loss, max_length: {epochs: 1}}
"""


def test_a_constant_nan_hyperparameter_is_stored_as_a_float(tmp_path: Path) -> None:
    config = parse_experiment_config(load_yaml_text(CONST_YAML))
    dumped = config.model_dump(mode="json")  # what the master stores (was None)
    assert math.isnan(dumped["hyperparameters"]["c_nan"]["val"])
    assert dumped["hyperparameters"]["c_inf"]["val"] == -INF
    assert json.loads(config.model_dump_json())["hyperparameters"]["c_inf"]["val"] == \
        "-Infinity"
    s = Store(tmp_path / "m.db")
    trials = [{"hparams": h, "seed": 0, "bracket": 0, "target": None}
              for h in initial_trials(config, 0)]
    exp = s.create_experiment_with_trials(dumped, "a", trials)
    back = s.experiment(exp)["config"]["hyperparameters"]
    assert math.isnan(back["c_nan"]["val"]) and back["pick"]["vals"] == [INF, "NaN"]
    hps = [t["hparams"] for t in s.trials(exp)]
    assert hps[0]["c_inf"] == -INF and math.isnan(hps[0]["c_nan"]) and hps[1]["pick"] == "NaN"
    # the columns are standard JSON: SQLite's JSON functions (the experiment list) read them
    rows, _ = s.experiment_page(None, 10)
    assert rows[0]["searcher"] == "grid"
    db = sqlite3.connect(tmp_path / "m.db")
    assert db.execute("SELECT json_valid(config) FROM experiments").fetchone() == (1,)
    assert db.execute("SELECT MIN(json_valid(hparams)) FROM trials").fetchone() == (1,)


# --- end to end: a diverging search on the real master ------------------------------------

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_diverging_single_trial_completes(cluster: Cluster, diverging_model: Path) -> None:
    config = cluster.write_config(
        "diverging-single", hyperparameters={"learning_rate": 1e6, "global_batch_size": 16},
        searcher={"name": "single", "metric": "val_loss", "max_length": {"epochs": 2}})
    exp = _finishes_completed(cluster, create(cluster, config, diverging_model))
    (t,) = exp["trials"]
    assert t["best_metric"] is None and t["steps_completed"] == 8


# --- the local (off-cluster) run ----------------------------------------------------------

def _strict_jsonl(path: Path) -> list[dict]:
    """Rows parsed as standard JSON: a bare NaN/Infinity literal fails the test."""
    def refuse(c: str) -> None:
        pytest.fail(f"bare {c} in {path.name}")
    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def test_a_local_run_writes_standard_json_and_ranks_nan_last(tmp_path: Path) -> None:
    from det_sdk.session import LocalSession

    config = {"searcher": {"metric": "val_loss", "smaller_is_better": True},
              "checkpoint_storage": {"save_trial_latest": 1, "save_trial_best": 1}}
    s = LocalSession.create(tmp_path, hparams={"c": NAN}, seed=1, config=config)
    try:
        s.report_metrics("validation", 10, 1, {"val_loss": 0.4, "acc": np.float32("inf")})
        s.report_metrics("validation", 20, 2, {"val_loss": NAN})
        uuids = []
        for steps, val in ((10, 0.4), (20, NAN), (30, -INF)):
            with s.storage.store() as (uuid, path):
                (path / "state.bin").write_bytes(b"s")
            s.report_checkpoint(uuid, {"steps_completed": steps, "epoch": steps // 10,
                                       "metrics": {"val_loss": val}})
            uuids.append(uuid)
        rows = _strict_jsonl(tmp_path / "1" / "metrics.jsonl")
        assert [r["metrics"] for r in rows] == [{"val_loss": 0.4, "acc": "Infinity"},
                                                {"val_loss": "NaN"}]
        back = s.read_metrics()
        assert back[0]["metrics"]["acc"] == INF and math.isnan(back[1]["metrics"]["val_loss"])
        assert _strict_jsonl(tmp_path / "1" / "checkpoints.jsonl")[1]["metrics"] == {
            "val_loss": "NaN"}
        # "best" is the finite one (a -inf loss is a diverged model too, not the best);
        # retention kept it and the latest, and dropped the NaN one
        assert s.checkpoint_for_trial(1, best=True) == uuids[0]
        assert [c["uuid"] for c in s.read_checkpoints()] == [uuids[0], uuids[2]]
    finally:
        s.close()
    again = LocalSession.reopen(tmp_path, 1)  # rewrites metrics.jsonl past the checkpoint
    try:
        assert math.isnan(again.read_metrics()[1]["metrics"]["val_loss"])
        _strict_jsonl(tmp_path / "1" / "metrics.jsonl")
    finally:
        again.close()


@pytest.mark.slow
def test_a_diverging_local_run_finishes_and_has_a_best_checkpoint(
        tmp_path: Path, diverging_model: Path) -> None:
    from tests.conftest import run_python

    runs = tmp_path / "runs"
    proc = run_python(diverging_model / "train.py", {"DET_RUNS_DIR": str(runs)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _strict_jsonl(runs / "1" / "metrics.jsonl")
    assert [r["metrics"]["val_loss"] for r in rows if r["group"] == "validation"] in (
        ["NaN"], ["Infinity"])
    from det_sdk.session import LocalSession

    s = LocalSession.reopen(runs, 1, writer=False)
    assert s.checkpoint_for_trial(1, best=True) == s.read_checkpoints()[-1]["uuid"]
