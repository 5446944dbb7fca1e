"""Determined's surface (issue 29): configs of both eras, CLI habits and small names.

This module's other half, its end-to-end tests (real processes):
tests/e2e/test_determined_compat.py.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from det_sdk.config import ConfigError, parse_experiment_config
from det_sdk.master.archive import pack
from det_sdk.master.core import Master


def _error(raw: dict) -> str:
    with pytest.raises(ConfigError) as err:
        parse_experiment_config(raw)
    return str(err.value)


def test_unitless_max_length_is_the_core_apis_integer() -> None:
    cfg = parse_experiment_config({"searcher": {"name": "single", "max_length": 100}})
    assert cfg.searcher.max_length.value == 100  # op.length as Determined gives it
    assert cfg.searcher.max_length.unit == "epochs"  # context.fit's reading
    for length in ({"epochs": 8}, {"batches": 50}):
        cfg = parse_experiment_config({"searcher": {"name": "single", "max_length": length}})
        assert cfg.searcher.max_length.model_dump(exclude_none=True) == length


@pytest.mark.parametrize("length, expected", [
    (0, "searcher.max_length: expected a positive integer"),
    ("ten", "searcher.max_length: expected a length: an integer (unitless"),
    (True, "searcher.max_length: expected a length"),
    (1.5, "searcher.max_length: expected a length"),
    ({"weeks": 3}, "searcher.max_length.weeks: unknown field (a length is one of"),
])
def test_max_length_errors_name_the_field_and_the_accepted_forms(length, expected) -> None:
    msg = _error({"searcher": {"name": "single", "max_length": length}})
    assert expected in msg
    assert "Length" not in msg and "instance of" not in msg  # no internal class name


def test_a_period_that_is_not_a_length_says_what_is_accepted() -> None:
    msg = _error({"min_validation_period": "often"})
    assert "min_validation_period: expected a length: {epochs: N}" in msg


ASHA_038 = {"name": "adaptive_asha", "metric": "x", "max_trials": 6, "time_metric": "batches",
            "max_time": 100, "divisor": 2, "num_rungs": 3, "mode": "aggressive"}


def test_asha_takes_time_metric_and_max_time() -> None:
    cfg = parse_experiment_config({"searcher": ASHA_038})
    assert cfg.searcher.time_metric == "batches" and cfg.searcher.budget == 100
    assert cfg.searcher.max_length is None and cfg.ignored_fields == []


@pytest.mark.parametrize("searcher, expected", [
    ({**ASHA_038, "max_time": None}, "searcher.max_time: required with searcher.time_metric"),
    ({k: v for k, v in ASHA_038.items() if k != "time_metric"},
     "searcher.time_metric: required with searcher.max_time"),
    ({**ASHA_038, "max_length": {"batches": 100}}, "searcher: give max_length or time_metric"),
    ({**ASHA_038, "max_time": 0}, "searcher.max_time:"),
    ({"name": "random", "max_trials": 2, "time_metric": "batches", "max_time": 9},
     "searcher.time_metric: unknown field for this searcher: only adaptive_asha"),
])
def test_time_budget_errors_name_the_field(searcher, expected) -> None:
    searcher = {k: v for k, v in searcher.items() if v is not None}
    assert expected in _error({"searcher": searcher})


def _master_with(tmp_path: Path, searcher: dict, hps: dict) -> tuple[Master, list[int]]:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    config = {"entrypoint": "python3 train.py", "searcher": searcher, "hyperparameters": hps,
              "reproducibility": {"experiment_seed": 5}}
    exp = master.create_experiment(config, base64.b64encode(pack(tmp_path / "model")).decode())
    return master, [t["id"] for t in master.store.trials(exp)]


def test_time_metric_rungs_follow_the_reported_value(tmp_path: Path) -> None:
    master, ids = _master_with(tmp_path, ASHA_038, {"h": {"type": "double", "minval": 0,
                                                         "maxval": 1}})
    search = master.search
    assert master.searcher_operation(ids[0]) is None  # a 0.38 script never asks for one
    # rungs at 25, 50 and 100 batches; a report before 25 decides nothing
    assert search.report_time(ids[0], 20, 0, {"x": 0.5, "batches": 20}) is False
    assert master.trial(ids[0])["target"] == 25
    # the reported time metric counts, not steps_completed
    assert search.report_time(ids[0], 999, 0, {"x": 0.5, "batches": 24}) is False
    assert search.report_time(ids[0], 30, 0, {"x": 0.5, "batches": 30}) is False  # first: on
    assert master.trial(ids[0])["target"] == 50
    assert search.report_time(ids[1], 30, 0, {"x": 0.6, "batches": 30}) is True  # worse: stop
    t1 = master.trial(ids[1])
    assert search.wants_stop(ids[1], t1) and search.finished(t1)
    assert search.report_time(ids[1], 40, 0, {"x": 0.1, "batches": 40}) is False  # decided
    assert not search.wants_stop(ids[0], master.trial(ids[0]))
    # a report without the searcher metric is not placed; `batches` falls back to steps
    assert search.report_time(ids[2], 30, 0, {"batches": 30}) is False
    assert master.trial(ids[2])["target"] == 25
    assert search.report_time(ids[2], 30, 0, {"x": 0.4}) is False
    assert master.trial(ids[2])["target"] == 50
    # one report past several rungs decides each; max_time ends the trial
    assert search.report_time(ids[0], 100, 0, {"x": 0.2, "batches": 100}) is True
    assert [r["promoted"] for r in master.store.trial_rungs(ids[0])] == [True, True]
    assert search.wants_stop(ids[0], master.trial(ids[0]))


def test_single_with_a_ranged_hyperparameter_samples_once(tmp_path: Path) -> None:
    master, ids = _master_with(tmp_path, {"name": "single", "max_length": 3},
                               {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
                                "bs": 8})
    (trial,) = [master.trial(i) for i in ids]
    assert 1e-4 <= trial["hparams"]["lr"] <= 0.1 and trial["hparams"]["bs"] == 8
    assert master.searcher_operation(ids[0])["length"] == 3


def test_log_format_is_determineds() -> None:
    import det_sdk

    assert det_sdk.LOG_FORMAT == "%(levelname)s: [%(process)s] %(name)s: %(message)s"
    assert "LOG_FORMAT" in det_sdk.__all__


def test_keras_exports_determineds_type_hint_names() -> None:
    import typing

    import numpy as np
    import tensorflow as tf

    import det_sdk.keras as dk

    args = typing.get_args(dk.InputData)
    assert tf.data.Dataset in args and dk.SequenceAdapter in args and tuple in args
    assert np.ndarray in typing.get_args(dk.ArrayLike)


@pytest.mark.parametrize("given, url", [
    ("127.0.0.1:18482", "http://127.0.0.1:18482"), ("node7", "http://node7:8080"),
    ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"), ("https://m.example", "https://m.example"),
    ("[::1]:9", "http://[::1]:9"),
])
def test_master_addresses_as_determined_users_write_them(given, url) -> None:
    from det_sdk.client import master_url

    assert master_url(given) == url


@pytest.mark.parametrize("bad", ["ftp://x", "host:port", ""])
def test_a_bad_master_address_is_a_usage_error(bad) -> None:
    from det_sdk.client import master_url
    from det_sdk.errors import UsageError

    with pytest.raises(UsageError, match="master address"):
        master_url(bad)


def test_saved_token_is_found_for_host_port(tmp_path: Path, monkeypatch) -> None:
    from det_sdk import client

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DET_USER_TOKEN", raising=False)
    client.save_token("http://127.0.0.1:8080", "tok")
    assert client.load_token("127.0.0.1:8080") == "tok"
    assert client.load_token("127.0.0.1") == "tok"  # Determined's default port
    assert client.load_token("127.0.0.1:9") is None
