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


# --- nested hyperparameters (Determined's: a mapping of hyperparameters inside one) --------

NESTED = {
    "global_batch_size": 64,
    "optimizer": {
        "learning_rate": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
        "momentum": {"type": "double", "minval": 0.0, "maxval": 0.9},
        "name": {"type": "categorical", "vals": ["sgd", "adam"]},
        "nesterov": True,
    },
    "layers": {"dense": {"units": {"type": "int", "minval": 16, "maxval": 64}}},
    "schedule": {"type": "const", "val": {"warmup": 2}},  # a constant dict, not a group
}


def test_nested_groups_parse_leaf_by_leaf():
    from det_sdk.config import (
        CategoricalHP,
        ConstHP,
        DoubleHP,
        IntHP,
        LogHP,
        hp_leaves,
    )

    cfg = _cfg(NESTED)
    leaves = {".".join(p): type(spec) for p, spec in hp_leaves(cfg.hyperparameters)}
    assert leaves == {
        "global_batch_size": ConstHP, "optimizer.learning_rate": LogHP,
        "optimizer.momentum": DoubleHP, "optimizer.name": CategoricalHP,
        "optimizer.nesterov": ConstHP, "layers.dense.units": IntHP, "schedule": ConstHP,
    }
    assert cfg.hyperparameters["schedule"].val == {"warmup": 2}
    # the validated config dumps and parses back to the same (the master stores the dump)
    assert _cfg(cfg.model_dump(mode="json")["hyperparameters"]) == cfg


@pytest.mark.parametrize("hps, path, says", [
    ({"optimizer": {"learning_rate": {"type": "log", "minval": "x", "maxval": -1}}},
     "hyperparameters.optimizer.learning_rate.minval", "valid number"),
    ({"optimizer": {"lr": {"type": "int", "minval": 3, "maxval": 2}}},
     "hyperparameters.optimizer.lr", "must not exceed"),
    ({"a": {"b": {"c": {"type": "bogus"}}}},
     "hyperparameters.a.b.c", "'bogus'"),
    ({"optimizer": {"lr": {"minval": 1, "maxval": 2}}},
     "hyperparameters.optimizer.lr", "no 'type'"),
    ({"log": {"int": {"type": "int", "minval": 1}}},  # keys that read like the type tags
     "hyperparameters.log.int.maxval", "missing"),
    ({"opt": {"lr": {"type": "categorical", "vals": []}}},
     "hyperparameters.opt.lr.vals", "at least 1"),
])
def test_a_bad_nested_leaf_is_named_by_its_dotted_path(hps, path, says):
    from det_sdk.config import ConfigError

    with pytest.raises(ConfigError) as info:
        _cfg(hps)
    line = str(info.value).splitlines()[1].strip()
    assert line.startswith(f"{path}: ") and says in line


def test_nesting_is_bounded():
    from det_sdk.config import MAX_HP_DEPTH, ConfigError

    deep: dict = {"leaf": 1}
    for i in range(MAX_HP_DEPTH):
        deep = {f"g{i}": deep}
    _cfg(deep)  # MAX_HP_DEPTH levels of groups: accepted
    with pytest.raises(ConfigError, match=r"hyperparameters\.top\.g\d.*nested more than"):
        _cfg({"top": deep})


def test_a_plain_dict_constant_reads_as_it_did_before():
    # before nested groups a mapping without `type` was a constant dict; it is now a group
    # of constants, which gives the trial the same dict
    hp = local_hparams(_cfg({"aug": {"flip": True, "crop": [4, 4]}, "empty": {}}), {})
    assert hp.to_dict() == {"aug": {"flip": True, "crop": [4, 4]}, "empty": {}}


def test_local_nested_constants_merge_with_init_defaults():
    cfg = _cfg({"optimizer": {"learning_rate": {"type": "log", "minval": -4, "maxval": -1},
                              "momentum": 0.9},
                "schedule": {"type": "const", "val": {"warmup": 2}}})
    hp = local_hparams(cfg, {"optimizer": {"learning_rate": 0.01, "momentum": 0.5,
                                           "extra": 1},
                             "schedule": {"decay": 3}, "bs": 8})
    # a constant overrides its default leaf by leaf; a constant dict replaces it whole
    assert hp.to_dict() == {"optimizer": {"learning_rate": 0.01, "momentum": 0.9,
                                          "extra": 1},
                            "schedule": {"warmup": 2}, "bs": 8}
    assert hp["optimizer"]["learning_rate"] == 0.01


def test_a_searched_nested_leaf_needs_a_local_value_named_by_its_path():
    from det_sdk.errors import DetSdkError

    cfg = _cfg(NESTED)
    with pytest.raises(ValueError) as info:
        local_hparams(cfg, {"optimizer": {"learning_rate": 0.01}})
    assert isinstance(info.value, DetSdkError)
    msg = str(info.value)
    assert "optimizer.momentum (double)" in msg and "layers.dense.units (int)" in msg
    assert "optimizer.learning_rate" not in msg  # given
    with pytest.raises(ValueError, match=r"optimizer\.learning_rate \(log\)"):
        local_hparams(cfg, {"optimizer.learning_rate": 0.01})  # a flat dotted key is not it


def test_nested_groups_read_as_read_only_dicts_with_helpful_errors():
    import copy
    import json
    import pickle

    hp = HParams({"optimizer": {"lr": 0.1, "sched": {"warmup": 2}}, "bs": 8})
    group = hp["optimizer"]
    assert isinstance(group, dict) and group == {"lr": 0.1, "sched": {"warmup": 2}}
    assert json.loads(json.dumps(group)) == group and dict(**group)["lr"] == 0.1
    with pytest.raises(TypeError, match=r"read-only \(optimizer\)"):
        group["lr"] = 1.0
    with pytest.raises(TypeError, match=r"read-only \(optimizer\.sched\)"):
        group["sched"].update(warmup=3)
    with pytest.raises(HParamKeyError) as info:
        group["sched"]["decay"]
    assert str(info.value) == ("hyperparameter 'optimizer.sched.decay' is not defined; "
                               "known: warmup")
    with pytest.raises(KeyError, match=r"hparams\['optimizer'\]\['lr'\]"):
        hp["optimizer.lr"]
    assert group.get("missing", 3) == 3
    mutable = copy.deepcopy(group)
    mutable["sched"]["warmup"] = 5  # a deep copy is plain dicts
    assert pickle.loads(pickle.dumps(group)) == group
    assert type(hp.to_dict()["optimizer"]["sched"]) is dict
    assert hp["optimizer"]["sched"]["warmup"] == 2


def test_merge_hparams_is_deep_and_changes_neither_side():
    from det_sdk.hparams import merge_hparams

    base = {"opt": {"lr": 0.1, "m": 0.9}, "bs": 8}
    over = {"opt": {"lr": 0.5}, "new": {"a": 1}}
    assert merge_hparams(base, over) == {"opt": {"lr": 0.5, "m": 0.9}, "bs": 8,
                                         "new": {"a": 1}}
    assert base == {"opt": {"lr": 0.1, "m": 0.9}, "bs": 8} and over["opt"] == {"lr": 0.5}


def test_a_local_core_run_reads_nested_values_from_a_yaml_config(tmp_path):
    import json

    import det_sdk as det

    config = tmp_path / "const.yaml"
    config.write_text(
        "hyperparameters:\n"
        "  global_batch_size: 8\n"
        "  optimizer:\n"
        "    learning_rate: {type: log, base: 10, minval: -4, maxval: -1}\n"
        "    name: adam\n"
        "  layers:\n"
        "    dense: {units: 16}\n")
    with det.core.init(runs_dir=tmp_path / "runs", config=str(config),
                       hparams={"optimizer": {"learning_rate": 0.01}}) as ctx:
        assert ctx.hparams["optimizer"] == {"learning_rate": 0.01, "name": "adam"}
        assert ctx.hparams["layers"]["dense"]["units"] == 16
        with pytest.raises(HParamKeyError, match=r"'layers\.dense\.width' is not defined"):
            ctx.hparams["layers"]["dense"]["width"]
    (run,) = (tmp_path / "runs").glob("*/run.json")
    assert json.loads(run.read_text())["hparams"]["optimizer"]["learning_rate"] == 0.01
    with pytest.raises(ValueError, match=r"optimizer\.learning_rate \(log\)"):
        det.core.init(runs_dir=tmp_path / "runs", config=str(config))
