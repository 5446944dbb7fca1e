"""NaN and infinities (issue 22, item 2): one wire encoding, one ranking rule, and a
diverging trial that COMPLETES.

The unit tests need no master; the end-to-end ones run real Keras trials on the module's
real master (the ``cluster`` fixture) and a real local run.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_nonfinite.py.
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

NAN, INF = math.nan, math.inf


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
