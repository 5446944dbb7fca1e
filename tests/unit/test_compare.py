"""The comparison's pure parts: the rows that differ (``det_sdk.master.compare``) and the
client's DataFrame-ready records (``det_sdk.experimental._compare``), with their
docstring examples."""

from __future__ import annotations

import doctest
import importlib

import pytest

from det_sdk.experimental._compare import Comparison
from det_sdk.master.compare import diff_rows, flat_config


@pytest.mark.parametrize("name", ["det_sdk.master.compare", "det_sdk.experimental._compare"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


def test_a_missing_value_differs_and_equal_structures_do_not() -> None:
    rows = {r["name"]: r for r in diff_rows([
        {"bind_mounts": [{"host_path": "/a"}], "x": 1.0, "only_a": None},
        {"bind_mounts": [{"host_path": "/a"}], "x": 1},
    ])}
    assert not rows["bind_mounts"]["differs"]
    assert not rows["x"]["differs"]  # 1.0 and 1 are the same number in JSON
    assert rows["only_a"]["differs"] and rows["only_a"]["values"] == [None, None]


def test_the_search_space_is_left_out_of_the_config_but_nested_fields_are_dotted() -> None:
    flat = flat_config({"hyperparameters": {"lr": {"type": "log"}},
                        "resources": {"slots_per_trial": 2, "devices": {}},
                        "data": {"hyperparameters": 1}})
    assert flat == {"resources.slots_per_trial": 2, "resources.devices": {},
                    "data.hyperparameters": 1}


def test_records_carry_nested_hyperparameters_by_dotted_name_and_skip_gaps() -> None:
    c = Comparison({"trials": [{"id": 1, "experiment_id": 9,
                                "hparams": {"optimizer.lr": 0.1},
                                "series": {"validation": {
                                    "steps": [5], "epoch": [1], "downsampled": True,
                                    "metrics": {"val_loss": [0.2], "val_acc": [None]}}}}],
                    "hparams": [], "config": []})
    assert c.records == [{"experiment_id": 9, "trial_id": 1, "group": "validation",
                          "steps_completed": 5, "epoch": 1, "hp.optimizer.lr": 0.1,
                          "val_loss": 0.2}]
    assert c.downsampled == [(1, "validation")]
    assert c.table() == [] and c.differences() == {"hparams": {}, "config": {}}
