"""Hyperparameter search: grid, random and adaptive ASHA, in the master and end to end.

The searcher tests in tests/integration drive a real ``Master`` (real SQLite file) in
their process, without launching trials; those in tests/e2e run real trials on a real
master.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_search.py.
"""

from __future__ import annotations

import base64
import random
from pathlib import Path

import pytest

from det_sdk.config import ExperimentConfig, parse_experiment_config
from det_sdk.master.archive import pack
from det_sdk.master.core import Master, RequestError
from det_sdk.master.searchers import initial_trials

# Stack-neutral: the searchers live in the master.
pytestmark = pytest.mark.stack_neutral

ASHA = {
    "name": "adaptive_asha", "metric": "val_handicapped_loss", "max_length": {"epochs": 4},
    "max_trials": 8, "divisor": 2, "num_rungs": 3, "mode": "aggressive",
}


def _master(data_dir: Path) -> Master:
    return Master(data_dir, slots=1, url="http://127.0.0.1:1")


def _experiment(master: Master, tmp_path: Path, searcher: dict, **hps: object) -> int:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    config = {"entrypoint": "python3 train.py", "searcher": searcher,
              "hyperparameters": hps, "reproducibility": {"experiment_seed": 5}}
    return master.create_experiment(config, base64.b64encode(pack(tmp_path / "model")).decode())


def test_asha_decisions_follow_the_rule_and_survive_a_master_restart(tmp_path: Path) -> None:
    master = _master(tmp_path / "m")
    exp = _experiment(master, tmp_path, ASHA, h={"type": "double", "minval": 0, "maxval": 1})
    trials = [t["id"] for t in master.store.trials(exp)]
    assert len(trials) == 8
    op = master.searcher_operation(trials[0])
    assert op == {"unit": "epochs", "length": 1, "completed": False}  # rungs: 1, 2, 4 epochs
    # metrics arrive in this order at rung 0; divisor 2: top max(1, n // 2) go on
    arrivals = [(trials[0], 0.5), (trials[1], 0.4), (trials[2], 0.45), (trials[3], 0.3)]
    answers = [master.complete_operation(t, "epochs", 1, m)["length"] for t, m in arrivals]
    assert answers == [2, 2, 1, 2]  # 0.45 ranks 2nd of 3: max(1, 3 // 2) = 1 go on
    assert master.searcher_operation(trials[2])["completed"] is True

    restarted = _master(tmp_path / "m")  # a new master on the same database
    again = restarted.complete_operation(trials[2], "epochs", 1, 0.1)  # a retried report
    assert again == {"unit": "epochs", "length": 1, "completed": True}  # first decision kept
    assert restarted.searcher_operation(trials[1])["length"] == 2
    # rung 1: trial 1 first (always goes on), then trial 0 worse (1 // 2 -> max 1: stops)
    assert restarted.complete_operation(trials[1], "epochs", 2, 0.35)["length"] == 4
    assert restarted.complete_operation(trials[0], "epochs", 2, 0.6)["completed"] is True
    final = restarted.complete_operation(trials[1], "epochs", 4, 0.2)
    assert final == {"unit": "epochs", "length": 4, "completed": True}  # the top rung ends it
    with pytest.raises(RequestError, match="counts in epochs"):
        restarted.complete_operation(trials[4], "batches", 10, 0.1)


def test_asha_modes_spread_trials_over_brackets(tmp_path: Path) -> None:
    master = _master(tmp_path / "m")
    searcher = {**ASHA, "mode": "conservative", "max_length": {"batches": 40}}
    exp = _experiment(master, tmp_path, searcher, h={"type": "double", "minval": 0, "maxval": 1})
    firsts = [master.searcher_operation(t["id"])["length"] for t in master.store.trials(exp)]
    # rungs of 10, 20 and 40 batches; bracket b starts at rung b, more trials in bracket 0
    assert sorted(set(firsts)) == [10, 20, 40] and firsts.count(10) > firsts.count(40)


NESTED = {
    "global_batch_size": 64,
    "optimizer": {
        "learning_rate": {"type": "log", "base": 10, "minval": -4, "maxval": -1, "count": 2},
        "name": {"type": "categorical", "vals": ["sgd", "adam"]},
        "momentum": 0.9,
    },
    "layers": {"dense": {"units": {"type": "int", "minval": 16, "maxval": 64, "count": 3}}},
}


def _nested_config(searcher: dict, hps: dict | None = None) -> ExperimentConfig:
    return parse_experiment_config({"hyperparameters": NESTED if hps is None else hps,
                                    "searcher": searcher})


def test_grid_over_nested_leaves_is_the_product_of_every_leaf() -> None:
    trials = initial_trials(_nested_config({"name": "grid"}), seed=0)
    got = sorted((round(t["optimizer"]["learning_rate"], 9), t["optimizer"]["name"],
                  t["layers"]["dense"]["units"]) for t in trials)
    assert got == sorted((lr, n, u) for lr in (0.0001, 0.1) for n in ("sgd", "adam")
                         for u in (16, 40, 64))
    for t in trials:  # nested dicts, constants in place, nothing else
        assert t["global_batch_size"] == 64 and t["optimizer"]["momentum"] == 0.9
        assert set(t) == {"global_batch_size", "optimizer", "layers"}
        assert set(t["optimizer"]) == {"learning_rate", "name", "momentum"}
    big = {"a": {"b": {"type": "int", "minval": 0, "maxval": 10**6, "count": 10_000}},
           "c": {"type": "categorical", "vals": [1, 2]}}
    with pytest.raises(ValueError, match=r"20000 trials.*a\.b: 10000, c: 2"):
        initial_trials(_nested_config({"name": "grid"}, big), seed=0)


def test_random_samples_nested_leaves_in_range_and_the_same_for_a_seed() -> None:
    cfg = _nested_config({"name": "random", "max_trials": 20})
    trials = initial_trials(cfg, seed=7)
    assert trials == initial_trials(cfg, seed=7)
    assert trials != initial_trials(cfg, seed=8)
    for t in trials:
        assert 1e-4 <= t["optimizer"]["learning_rate"] <= 0.1
        assert t["optimizer"]["name"] in ("sgd", "adam") and t["optimizer"]["momentum"] == 0.9
        assert 16 <= t["layers"]["dense"]["units"] <= 64
    assert len({t["layers"]["dense"]["units"] for t in trials}) > 5  # each leaf is sampled
    assert {t["optimizer"]["name"] for t in trials} == {"sgd", "adam"}
    # a flat config draws as it did before nested groups: the same points for a seed
    flat = _nested_config({"name": "random", "max_trials": 3},
                          {"lr": {"type": "double", "minval": 0, "maxval": 1}, "bs": 8,
                           "u": {"type": "int", "minval": 1, "maxval": 9}})
    rng = random.Random(7)
    expect = []
    for _ in range(3):
        lr = rng.uniform(0, 1)
        expect.append({"lr": lr, "bs": 8, "u": rng.randint(1, 9)})
    assert initial_trials(flat, seed=7) == expect


def test_single_samples_searched_nested_leaves_once_and_takes_nested_constants() -> None:
    # Determined's single searcher samples a ranged hyperparameter once (issue 29): the
    # first draw of a random search with the same seed
    (one,) = initial_trials(_nested_config({"name": "single"}), seed=3)
    assert one == initial_trials(_nested_config({"name": "random", "max_trials": 1}), seed=3)[0]
    assert initial_trials(_nested_config({"name": "single"}), seed=3) == [one]
    assert initial_trials(_nested_config({"name": "single"}), seed=4) != [one]
    consts = {"opt": {"lr": 0.1, "sched": {"type": "const", "val": {"warmup": 2}}}, "bs": 8}
    assert initial_trials(_nested_config({"name": "single"}, consts), seed=0) == [
        {"opt": {"lr": 0.1, "sched": {"warmup": 2}}, "bs": 8}]


def test_asha_trials_get_nested_hparams_in_the_store(tmp_path: Path) -> None:
    master = _master(tmp_path / "m")
    exp = _experiment(master, tmp_path, ASHA, opt={
        "lr": {"type": "double", "minval": 0, "maxval": 1}, "m": 0.5})
    trials = master.store.trials(exp)
    assert len(trials) == 8
    assert all(set(t["hparams"]["opt"]) == {"lr", "m"} and 0 <= t["hparams"]["opt"]["lr"] <= 1
               for t in trials)
