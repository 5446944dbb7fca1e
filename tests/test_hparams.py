"""det_sdk.hparams: the read-only mapping a script sees, and local hyperparameter values."""

from __future__ import annotations

import pytest

from det_sdk.config import parse_experiment_config
from det_sdk.hparams import HParamKeyError, HParams, local_hparams


def test_hparams_reads_like_a_mapping():
    hp = HParams({"dropout": 0.5, "global_batch_size": 128})
    assert hp["dropout"] == 0.5
    assert dict(hp) == {"dropout": 0.5, "global_batch_size": 128}
    assert len(hp) == 2
    assert "dropout" in hp
    assert hp.get("missing", 3) == 3  # Mapping.get relies on KeyError
    assert hp.to_dict() == {"dropout": 0.5, "global_batch_size": 128}


def test_hparams_copies_its_input():
    values = {"a": 1}
    hp = HParams(values)
    values["a"] = 2
    assert hp["a"] == 1


def test_missing_key_names_it_and_lists_the_known_ones():
    hp = HParams({"dropout": 0.5, "global_batch_size": 128})
    with pytest.raises(KeyError) as info:
        hp["learning_rate"]
    err = info.value
    assert isinstance(err, KeyError)
    assert isinstance(err, HParamKeyError)
    assert str(err) == (
        "hyperparameter 'learning_rate' is not defined; known: dropout, global_batch_size"
    )


def test_missing_key_with_no_hparams_at_all():
    with pytest.raises(KeyError, match=r"'lr' is not defined; known: \(none\)"):
        HParams({})["lr"]


def _cfg(hyperparameters):
    return parse_experiment_config({"hyperparameters": hyperparameters})


def test_local_hparams_without_config_are_the_defaults():
    hp = local_hparams(None, {"lr": 0.1})
    assert isinstance(hp, HParams)
    assert hp.to_dict() == {"lr": 0.1}


def test_config_constants_override_init_defaults():
    cfg = _cfg({"dropout": 0.5, "act": {"type": "const", "val": "relu"}})
    hp = local_hparams(cfg, {"dropout": 0.1, "act": "tanh", "lr": 0.01})
    assert hp.to_dict() == {"dropout": 0.5, "act": "relu", "lr": 0.01}


def test_local_hparams_does_not_change_the_defaults_given():
    defaults = {"dropout": 0.1}
    local_hparams(_cfg({"dropout": 0.5}), defaults)
    assert defaults == {"dropout": 0.1}


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "int", "minval": 1, "maxval": 4},
        {"type": "double", "minval": 0.1, "maxval": 0.5},
        {"type": "log", "minval": -4, "maxval": -1},
        {"type": "categorical", "vals": ["sgd", "adam"]},
    ],
    ids=lambda s: s["type"],
)
def test_searched_hparam_without_local_value_is_an_error(spec):
    with pytest.raises(ValueError) as info:
        local_hparams(_cfg({"units": spec, "dropout": 0.5}), {"dropout": 0.1})
    msg = str(info.value)
    assert f"units ({spec['type']})" in msg
    assert "dropout" not in msg  # only the unresolved one is named
    assert "hparams=" in msg  # says how to fix it


def test_every_unresolved_hparam_is_named():
    cfg = _cfg({"a": {"type": "int", "minval": 1, "maxval": 2},
                "b": {"type": "categorical", "vals": [1]}})
    with pytest.raises(ValueError) as info:
        local_hparams(cfg, {})
    assert "a (int)" in str(info.value)
    assert "b (categorical)" in str(info.value)


def test_searched_hparam_with_a_default_is_accepted():
    cfg = _cfg({"units": {"type": "int", "minval": 1, "maxval": 4}, "dropout": 0.5})
    hp = local_hparams(cfg, {"units": 3})
    assert hp["units"] == 3
    assert hp["dropout"] == 0.5
