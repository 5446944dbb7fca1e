"""det_sdk.config: the proposal's YAMLs parse, and bad configs fail naming the field."""

from __future__ import annotations

import json
import math
import os
import textwrap

import pytest
import yaml

from det_sdk.config import (
    CategoricalHP,
    ConfigError,
    ConstHP,
    DoubleHP,
    IntHP,
    LogHP,
    apply_environment_variables,
    environment_variables,
    load_yaml_file,
    load_yaml_text,
    parse_experiment_config,
    parse_job_config,
)
from det_sdk.errors import DetSdkError

EXPERIMENT_YAML = textwrap.dedent(
    """\
    hyperparameters:
      dropout: 0.5
      global_batch_size: 128
    entrypoint_script: python3 train.py
    """
)

JOB_YAML = textwrap.dedent(
    """\
    entrypoint_script: python3 batch_inference.py
    data:
      trial_id: 777
      batch_size: 64
    resources:
      slots: 8
    """
)


def _error(parse, raw) -> str:
    with pytest.raises(ConfigError) as info:
        parse(raw)
    return str(info.value)


# --- the proposal's configs, as written ---------------------------------------------------


def test_proposal_experiment_yaml_file_parses(tmp_path):
    path = tmp_path / "const.yaml"
    path.write_text(EXPERIMENT_YAML)
    cfg = parse_experiment_config(path)
    assert cfg.entrypoint_script == "python3 train.py"
    assert set(cfg.hyperparameters) == {"dropout", "global_batch_size"}
    assert isinstance(cfg.hyperparameters["dropout"], ConstHP)
    assert cfg.hyperparameters["dropout"].val == 0.5
    assert cfg.hyperparameters["global_batch_size"].val == 128
    assert cfg.searcher is None
    assert cfg.resources.slots_per_trial == 1


def test_proposal_experiment_yaml_parses_from_a_str_path_and_a_mapping(tmp_path):
    path = tmp_path / "const.yaml"
    path.write_text(EXPERIMENT_YAML)
    from_str = parse_experiment_config(str(path))
    from_mapping = parse_experiment_config(yaml.safe_load(EXPERIMENT_YAML))
    assert from_str == from_mapping
    assert from_mapping.hyperparameters["global_batch_size"].val == 128


def test_proposal_job_yaml_parses(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(JOB_YAML)
    job = parse_job_config(path)
    assert job.entrypoint_script == "python3 batch_inference.py"
    assert job.data == {"trial_id": 777, "batch_size": 64}
    assert job.resources.slots == 8


def test_entrypoint_alias_works_for_experiment_and_job():
    assert parse_experiment_config({"entrypoint": "python3 t.py"}).entrypoint_script == (
        "python3 t.py"
    )
    assert parse_job_config({"entrypoint": "python3 bi.py"}).entrypoint_script == "python3 bi.py"


# --- each kind of hyperparameter -----------------------------------------------------------


def test_const_bare_value():
    hp = parse_experiment_config({"hyperparameters": {"units": 64}}).hyperparameters["units"]
    assert isinstance(hp, ConstHP)
    assert hp.val == 64


def test_const_bare_list_value():
    hp = parse_experiment_config({"hyperparameters": {"sizes": [1, 2]}}).hyperparameters["sizes"]
    assert isinstance(hp, ConstHP)
    assert hp.val == [1, 2]


def test_const_explicit():
    hp = parse_experiment_config(
        {"hyperparameters": {"act": {"type": "const", "val": "relu"}}}
    ).hyperparameters["act"]
    assert isinstance(hp, ConstHP)
    assert hp.val == "relu"


def test_int_hparam():
    hp = parse_experiment_config(
        {"hyperparameters": {"units": {"type": "int", "minval": 8, "maxval": 64, "count": 3}}}
    ).hyperparameters["units"]
    assert isinstance(hp, IntHP)
    assert (hp.minval, hp.maxval, hp.count) == (8, 64, 3)


def test_double_hparam():
    hp = parse_experiment_config(
        {"hyperparameters": {"dropout": {"type": "double", "minval": 0.1, "maxval": 0.5}}}
    ).hyperparameters["dropout"]
    assert isinstance(hp, DoubleHP)
    assert (hp.minval, hp.maxval, hp.count) == (0.1, 0.5, None)


def test_log_hparam_default_base_and_explicit_base():
    hps = parse_experiment_config(
        {
            "hyperparameters": {
                "lr": {"type": "log", "minval": -4, "maxval": -1},
                "lr2": {"type": "log", "minval": -4, "maxval": -1, "base": 2},
            }
        }
    ).hyperparameters
    assert isinstance(hps["lr"], LogHP)
    assert (hps["lr"].minval, hps["lr"].maxval, hps["lr"].base) == (-4.0, -1.0, 10.0)
    assert hps["lr2"].base == 2.0


def test_categorical_hparam():
    hp = parse_experiment_config(
        {"hyperparameters": {"opt": {"type": "categorical", "vals": ["sgd", "adam"]}}}
    ).hyperparameters["opt"]
    assert isinstance(hp, CategoricalHP)
    assert hp.vals == ["sgd", "adam"]


def test_categorical_needs_at_least_one_value():
    msg = _error(
        parse_experiment_config, {"hyperparameters": {"opt": {"type": "categorical", "vals": []}}}
    )
    assert "hyperparameters.opt.vals" in msg


# --- rejections name the field by its dotted path -----------------------------------------


def test_unknown_top_level_key():
    msg = _error(parse_experiment_config, {"entrypoint_script": "x", "bogus_key": 1})
    assert "bogus_key: unknown field" in msg
    assert msg.startswith("invalid experiment config")


def test_unknown_top_level_key_in_job_config():
    msg = _error(parse_job_config, {"entrypoint_script": "x", "hyperparameters": {}})
    assert "hyperparameters: unknown field" in msg
    assert msg.startswith("invalid job config")


def test_unknown_nested_key_in_searcher():
    msg = _error(parse_experiment_config, {"searcher": {"name": "single", "foo": 1}})
    assert "searcher.foo: unknown field" in msg


def test_unknown_nested_key_in_resources():
    msg = _error(parse_job_config, {"entrypoint_script": "x", "resources": {"gpus": 2}})
    assert "resources.gpus: unknown field" in msg


def test_wrong_type():
    msg = _error(parse_experiment_config, {"resources": {"slots_per_trial": "two"}})
    assert "resources.slots_per_trial:" in msg
    assert "'two'" in msg  # shows what it got


def test_wrong_type_in_job_config():
    msg = _error(parse_job_config, {"entrypoint_script": "x", "resources": {"slots": "eight"}})
    assert "resources.slots:" in msg
    assert "'eight'" in msg


def test_missing_entrypoint_in_job_config():
    msg = _error(parse_job_config, {"data": {"trial_id": 1}})
    assert "entrypoint_script: required field is missing" in msg


def test_random_searcher_without_max_trials():
    msg = _error(parse_experiment_config, {"searcher": {"name": "random"}})
    assert "searcher.max_trials: required field is missing" in msg


def test_unknown_searcher_name():
    msg = _error(parse_experiment_config, {"searcher": {"name": "bayes"}})
    assert "searcher" in msg
    assert "'bayes'" in msg


@pytest.mark.parametrize("kind", ["int", "double", "log"])
def test_minval_greater_than_maxval(kind):
    msg = _error(
        parse_experiment_config,
        {"hyperparameters": {"lr": {"type": kind, "minval": 5, "maxval": 1}}},
    )
    assert "hyperparameters.lr:" in msg
    assert "must not exceed maxval" in msg


def test_minval_greater_than_maxval_for_hparam_named_like_a_tag():
    msg = _error(
        parse_experiment_config,
        {"hyperparameters": {"log": {"type": "log", "minval": 5, "maxval": 1}}},
    )
    assert "hyperparameters.log:" in msg


def test_unknown_hyperparameter_type():
    msg = _error(parse_experiment_config, {"hyperparameters": {"lr": {"type": "bogus"}}})
    assert "hyperparameters.lr:" in msg
    assert "'bogus'" in msg


def test_hyperparameter_missing_range_field():
    msg = _error(parse_experiment_config, {"hyperparameters": {"u": {"type": "int", "minval": 1}}})
    assert "hyperparameters.u.maxval: required field is missing" in msg


@pytest.mark.parametrize(
    "length", [{"epochs": 1, "batches": 2}, {}], ids=["both", "neither"]
)
@pytest.mark.parametrize("field", ["min_validation_period", "min_checkpoint_period"])
def test_length_needs_exactly_one_of_epochs_or_batches(field, length):
    msg = _error(parse_experiment_config, {field: length})
    assert f"{field}:" in msg
    assert "exactly one of 'epochs' or 'batches'" in msg


def test_length_in_searcher_max_length():
    msg = _error(
        parse_experiment_config,
        {"searcher": {"name": "single", "max_length": {"epochs": 1, "batches": 1}}},
    )
    assert "searcher.max_length:" in msg


def test_length_must_be_positive():
    msg = _error(parse_experiment_config, {"min_validation_period": {"epochs": 0}})
    assert "min_validation_period.epochs:" in msg


def test_several_problems_are_all_reported():
    msg = _error(
        parse_experiment_config,
        {"bogus": 1, "resources": {"slots_per_trial": "two"}, "max_restarts": -1},
    )
    assert "bogus: unknown field" in msg
    assert "resources.slots_per_trial:" in msg
    assert "max_restarts:" in msg


@pytest.mark.parametrize("raw", [[1, 2], 5, None], ids=["list", "int", "none"])
def test_non_mapping_top_level(raw):
    msg = _error(parse_experiment_config, raw)
    assert "expected a mapping at the top level" in msg
    assert f"got {type(raw).__name__}" in msg


def test_yaml_file_whose_top_level_is_a_list(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    msg = _error(parse_experiment_config, path)
    assert "expected a mapping at the top level, got list" in msg
    assert str(path) in msg


def test_non_mapping_top_level_job_config():
    msg = _error(parse_job_config, ["python3 x.py"])
    assert "invalid job config: expected a mapping at the top level, got list" in msg


def test_missing_yaml_file(tmp_path):
    path = tmp_path / "nope.yaml"
    msg = _error(parse_experiment_config, path)
    assert "not found" in msg
    assert str(path) in msg
    msg = _error(parse_job_config, str(path))
    assert str(path) in msg


def test_invalid_yaml_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("hyperparameters: {dropout: 0.5\nentrypoint_script: [unclosed\n")
    msg = _error(parse_experiment_config, path)
    assert "not valid YAML" in msg
    assert str(path) in msg


def test_load_yaml_file_of_a_directory(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_yaml_file(tmp_path)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_range_without_type_is_an_error_not_a_constant():
    msg = _error(parse_experiment_config, {"hyperparameters": {"lr": {"minval": 1, "maxval": 2}}})
    assert "hyperparameters.lr:" in msg and "no 'type'" in msg


def test_top_level_key_named_like_a_tag_keeps_its_name():
    msg = _error(parse_experiment_config, {"random": 1})
    assert "random: unknown field" in msg


@pytest.mark.parametrize(
    ("searcher", "expected"),
    [
        ({"name": "adaptive_asha", "max_trials": 4}, "searcher.max_length: adaptive_asha needs"),
        ({"name": "adaptive_asha", "max_trials": 4, "max_length": {"epochs": 4},
          "mode": "wild"}, "searcher.mode: Input should be 'aggressive'"),
        ({"name": "adaptive_asha", "max_trials": 4, "max_length": {"epochs": 4},
          "divisor": 1}, "searcher.divisor:"),
        ({"name": "random", "max_trials": 0}, "searcher.max_trials:"),
    ],
    ids=["asha-no-length", "asha-mode", "asha-divisor", "random-no-trials"],
)
def test_searcher_settings_are_checked(searcher, expected):
    assert expected in _error(parse_experiment_config, {"searcher": searcher})


def test_scheduling_unit_must_be_positive():
    assert "scheduling_unit:" in _error(parse_experiment_config, {"scheduling_unit": 0})


# --- Determined configs (issue 14): trial classes, units, fields det_sdk ignores ----------

SEED_TUTORIAL_YAML = textwrap.dedent(
    """\
    description: mnist_keras_const_simple
    hyperparameters:
        global_batch_size: 32
    searcher:
        name: single
        metric: val_accuracy
        max_steps: 40
    min_validation_period: 10
    entrypoint: model_def:MNISTTrial
    """
)


def test_seed_tutorial_config_parses_as_written():
    cfg = parse_experiment_config(yaml.safe_load(SEED_TUTORIAL_YAML))
    # Determined's module:Class entrypoint runs det_sdk's trial runner
    assert cfg.entrypoint_script == "python3 -m det_sdk.launch.trial model_def:MNISTTrial"
    # older releases' steps are scheduling_unit (100) batches each
    assert cfg.searcher.max_length.batches == 4000
    assert cfg.min_validation_period.batches == 1000
    unit = parse_experiment_config({**yaml.safe_load(SEED_TUTORIAL_YAML), "scheduling_unit": 5})
    assert (unit.searcher.max_length.batches, unit.min_validation_period.batches) == (200, 50)
    # what the master stores parses to the same config (the runner is a plain command)
    assert parse_experiment_config(cfg.model_dump(mode="json")) == cfg


@pytest.mark.parametrize("entrypoint, command", [
    ("model_def:MNISTTrial", "python3 -m det_sdk.launch.trial model_def:MNISTTrial"),
    ("pkg.models:Trial_2", "python3 -m det_sdk.launch.trial pkg.models:Trial_2"),
    ("python3 train.py", "python3 train.py"),
    ("python3 -m pkg:x", "python3 -m pkg:x"),
    ("sh -c 'a:b'", "sh -c 'a:b'"),
    (["python3", "train.py", "--name", "a b"], "python3 train.py --name 'a b'"),
    (["model_def:MNISTTrial"], "python3 -m det_sdk.launch.trial model_def:MNISTTrial"),
])
def test_entrypoint_forms(entrypoint, command):
    assert parse_experiment_config({"entrypoint": entrypoint}).entrypoint_script == command


def test_records_lengths_count_global_batches():
    cfg = parse_experiment_config({
        "hyperparameters": {"global_batch_size": {"type": "const", "val": 32}},
        "records_per_epoch": 60000,
        "searcher": {"name": "single", "max_length": {"records": 100}},
        "min_validation_period": {"records": 64}, "min_checkpoint_period": {"records": 65}})
    assert cfg.searcher.max_length.batches == 4  # ceil(100 / 32)
    assert (cfg.min_validation_period.batches, cfg.min_checkpoint_period.batches) == (2, 3)
    assert cfg.records_per_epoch == 60000


@pytest.mark.parametrize("raw, expected", [
    ({"searcher": {"name": "single", "max_length": {"records": 100}}},
     "searcher.max_length.records: counting records in batches needs a constant "
     "hyperparameters.global_batch_size"),
    ({"hyperparameters": {"global_batch_size": {"type": "int", "minval": 8, "maxval": 64}},
      "min_validation_period": {"records": 100}},
     "min_validation_period.records: counting records in batches needs a constant"),
    ({"hyperparameters": {"global_batch_size": 8}, "min_checkpoint_period": {"records": 0}},
     "min_checkpoint_period.records: expected a positive integer, got 0"),
    ({"hyperparameters": {"global_batch_size": 8},
      "min_checkpoint_period": {"records": 8, "epochs": 1}},
     "min_checkpoint_period: give exactly one of 'epochs', 'batches' or 'records'"),
    ({"searcher": {"name": "single", "max_steps": 4, "max_length": {"epochs": 1}}},
     "searcher: give max_length or the older max_steps, not both"),
    ({"records_per_epoch": 0}, "records_per_epoch: Input should be greater than or equal to 1"),
])
def test_determined_lengths_errors_name_the_field(raw, expected):
    assert expected in _error(parse_experiment_config, raw)


def test_known_determined_fields_are_accepted_with_one_warning(caplog):
    raw = yaml.safe_load(SEED_TUTORIAL_YAML)
    raw.update({
        "environment": {"image": "determinedai/environments:tf"},
        "bind_mounts": [{"host_path": "/data", "container_path": "/data"}],
        "profiling": {"enabled": True}, "optimizations": {"aggregation_frequency": 2},
        "data_layer": {"type": "shared_fs"}, "labels": ["a"],
        "resources": {"slots_per_trial": 2, "shm_size": 4096, "resource_pool": "gpu"},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/c",
                               "storage_path": "det"},
    })
    raw["searcher"]["source_trial_id"] = 3
    with caplog.at_level("WARNING", logger="det_sdk.config"):
        assert parse_experiment_config(raw).ignored_fields  # found, but not said
        assert not caplog.records
        cfg = parse_experiment_config(raw, warn_ignored=True)
    expected = ["bind_mounts", "checkpoint_storage.storage_path", "data_layer",
                "environment.image", "labels", "optimizations",
                "resources.resource_pool", "resources.shm_size", "searcher.source_trial_id"]
    assert cfg.ignored_fields == expected
    (record,) = [r for r in caplog.records if r.name == "det_sdk.config"]
    assert ", ".join(expected) in record.getMessage()
    # what det_sdk implements is kept; the ignored fields are not stored
    assert cfg.resources.slots_per_trial == 2 and cfg.checkpoint_storage.host_path == "/tmp/c"
    dumped = cfg.model_dump(mode="json")
    assert dumped["environment"] == {"environment_variables": []}
    assert "shm_size" not in dumped["resources"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="det_sdk.config"):
        parse_experiment_config(yaml.safe_load(SEED_TUTORIAL_YAML), warn_ignored=True)
    assert not caplog.records  # nothing ignored, nothing said


@pytest.mark.parametrize("raw, field", [
    ({"enviroment": {"image": "x"}}, "enviroment"),
    ({"resources": {"shm_sise": 1}}, "resources.shm_sise"),
    ({"checkpoint_storage": {"storage_pth": "x"}}, "checkpoint_storage.storage_pth"),
    ({"searcher": {"name": "single", "max_step": 3}}, "searcher.max_step"),
])
def test_misspelled_determined_fields_are_still_errors(raw, field):
    assert f"  {field}: unknown field" in _error(parse_experiment_config, raw)


def test_a_misspelled_field_gets_the_nearest_known_name():
    msg = _error(parse_experiment_config, {"enviroment": {}, "resources": {"shm_sise": 1},
                                           "recods_per_epoch": 5, "zzz": 1})
    assert "  enviroment: unknown field (did you mean 'environment'?)" in msg
    assert "  resources.shm_sise: unknown field (did you mean 'shm_size'?)" in msg
    assert "  recods_per_epoch: unknown field (did you mean 'records_per_epoch'?)" in msg
    assert "  zzz: unknown field\n" in msg + "\n"


# --- the loader: YAML 1.2 (core schema), JSON's types only --------------------------------


@pytest.mark.parametrize("text, value", [
    ("1e-3", 0.001), ("-1E+4", -10000.0), (".5", 0.5), ("+.5e1", 5.0), ("5e-2", 0.05),
    ("5.", 5.0), ("1.5E3", 1500.0), ("0o17", 15), ("0x1F", 31), ("017", 17), ("-0", 0),
    ("+12", 12), ("true", True), ("True", True), ("FALSE", False), ("null", None),
    ("~", None), ("", None),
    # YAML 1.1's booleans are text in YAML 1.2, as in Determined
    ("yes", "yes"), ("no", "no"), ("on", "on"), ("off", "off"), ("y", "y"), ("n", "n"),
    # 1.1's other implicit types are text too: dates, sexagesimals, underscores, '='
    ("2024-01-01", "2024-01-01"), ("2024-01-01T10:00:00Z", "2024-01-01T10:00:00Z"),
    ("1:30", "1:30"), ("1_000", "1_000"), ("0b101", "0b101"), ("=", "="), ("e3", "e3"),
    # quoted scalars stay text
    ("'1e-3'", "1e-3"), ('".5"', ".5"), ("'true'", "true"), ("'null'", "null"),
    ("!!str 1e3", "1e3"),
])
def test_scalars_as_yaml_1_2_reads_them(text, value):
    got = load_yaml_text(f"v: {text}\n")["v"]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text, positive", [(".inf", True), ("-.Inf", False), ("+.INF", True)])
def test_infinities(text, positive):
    got = load_yaml_text(f"v: {text}")["v"]
    assert math.isinf(got) and (got > 0) == positive


def test_nan():
    assert math.isnan(load_yaml_text("v: .nan")["v"])


@pytest.mark.parametrize("text, field, tag, line", [
    ("a: 1\nb: !!binary aGVsbG8=\n", "b", "!!binary", 2),
    ("a:\n  b: !!set {x, y}\n", "a.b", "!!set", 2),
    ("when: !!timestamp 2024-01-01\n", "when", "!!timestamp", 1),
    ("x: [1, !!omap [a: 1]]\n", "x[1]", "!!omap", 1),
    ("x: !!pairs [a: 1]\n", "x", "!!pairs", 1),
    ("data:\n  f: !!python/object/apply:os.system [ls]\n", "data.f",
     "!!python/object/apply:os.system", 2),
    ("data: {f: !custom x}\n", "data.f", "!custom", 1),
    ("!!set {a}\n", "(top level)", "!!set", 1),
])
def test_tags_outside_json_are_refused_with_field_and_line(tmp_path, text, field, tag, line):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    msg = _error(load_yaml_file, path)
    assert str(path) in msg and f"line {line}," in msg
    assert f"{field}: the YAML tag {tag} has no JSON form" in msg
    assert "expected text, a number, a boolean, null, a list or a mapping" in msg


@pytest.mark.parametrize("text, field, line", [
    ("? [a, b]\n: 1\n", "(top level)", 1),
    ("data:\n  ? {x: 1}\n  : 2\n", "data", 2),
])
def test_complex_keys_are_refused_cleanly(text, field, line):
    msg = _error(load_yaml_text, text)
    assert f"line {line}, column" in msg and f"{field}: a mapping key that is a" in msg


@pytest.mark.parametrize("text, expected", [
    ("a: !!int abc\n", "line 1, column 4: a: 'abc' is not an integer"),
    ("a:\n  b: [!!float x]\n", "line 2, column 7: a.b[0]: 'x' is not a number"),
    ("a: !!bool yes\n", "a: 'yes' is not a boolean (true or false)"),
    ("a: [{x: 1}, {y: 2, y: 3}]\n", "a[1].y: duplicate key 'y' at line 1 (first at line 1)"),
    ("name: a\nname: b\n", "line 2, column 1: name: duplicate key 'name' at line 2"),
    ("1: a\n0x1: b\n", "duplicate key 1 at line 2"),
])
def test_bad_scalars_and_duplicates_name_line_and_field(text, expected):
    assert expected in _error(load_yaml_text, text)


def test_merge_keys():
    data = load_yaml_text(textwrap.dedent("""\
        base: &base {lr: 1e-3, dropout: .5}
        other: &other {lr: 0.1, momentum: 0.9}
        one:
          <<: *base
          dropout: 0.25
        both: {<<: [*base, *other], extra: 1}
        nested:
          hp:
            <<: *base
    """))
    assert data["one"] == {"lr": 0.001, "dropout": 0.25}  # the mapping's own keys win
    assert data["both"] == {"lr": 0.001, "dropout": 0.5, "momentum": 0.9, "extra": 1}
    assert data["nested"] == {"hp": {"lr": 0.001, "dropout": 0.5}}
    assert "<<" not in json.dumps(data)


def test_a_merge_of_a_scalar_is_refused():
    assert "not valid YAML" in _error(load_yaml_text, "a: {<<: 3}\n")


def test_loaded_configs_are_json():
    data = load_yaml_text("a: 2024-01-01\nb: [yes, 1e-3, 0x1F]\nc: {1: x}\n")
    assert json.loads(json.dumps(data)) == {"a": "2024-01-01", "b": ["yes", 0.001, 31],
                                            "c": {"1": "x"}}


def test_config_error_is_a_det_sdk_error():
    assert issubclass(ConfigError, DetSdkError) and issubclass(ConfigError, ValueError)


def test_yaml_1_2_numbers_reach_the_hyperparameters(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("entrypoint_script: python3 train.py\nhyperparameters:\n  learning_rate: "
                    "5e-2\n  dropout: .5\n  lr: {type: log, base: 10, minval: -4, maxval: -1e0}\n")
    cfg = parse_experiment_config(path)
    assert cfg.hyperparameters["learning_rate"].val == 0.05
    assert cfg.hyperparameters["dropout"].val == 0.5
    assert cfg.hyperparameters["lr"].maxval == -1.0


# --- environment.environment_variables ----------------------------------------------------


def _env(value) -> dict:
    return {"environment": {"environment_variables": value}}


def test_environment_variables_as_a_list():
    cfg = parse_experiment_config({"environment": {
        "environment_variables": ["DATA=/data", "OPTS=a=b", "EMPTY=", "DATA=/d2"],
        "image": "determinedai/environments:tf"}})
    assert cfg.environment.variables == {"DATA": "/d2", "OPTS": "a=b", "EMPTY": ""}
    assert cfg.ignored_fields == ["environment.image"]  # the rest still warned of
    # the stored config (the master's, DET_EXPERIMENT_CONFIG) gives them back
    stored = cfg.model_dump(mode="json")
    assert environment_variables(stored) == {"DATA": "/d2", "OPTS": "a=b", "EMPTY": ""}
    assert parse_experiment_config(stored).environment.variables == cfg.environment.variables


def test_environment_variables_per_device_take_cpu():
    cfg = parse_experiment_config(_env({"cpu": ["A=cpu"], "cuda": ["A=cuda", "B=1"],
                                        "rocm": ["C=1"]}))
    assert cfg.environment.variables == {"A": "cpu"}
    # det_sdk's slots are CPUs: the other devices' lists are checked, and said ignored
    assert cfg.ignored_fields == ["environment.environment_variables.cuda",
                                  "environment.environment_variables.rocm"]
    old = parse_experiment_config(_env({"gpu": ["A=1"]}))  # Determined's older name
    assert old.environment.variables == {} and old.environment.environment_variables["cuda"]


def test_job_config_environment_variables():
    job = parse_job_config({"entrypoint": "python3 bi.py", "environment": {
        "image": "x", "environment_variables": ["A=1"]}})
    assert job.environment.variables == {"A": "1"}
    assert "environment.environment_variables: entry 0 'A' has no '='" in _error(
        parse_job_config, {"entrypoint": "x", **_env(["A"])})


@pytest.mark.parametrize("value, expected", [
    (["FOO"], "entry 0 'FOO' has no '=': expected 'NAME=value'"),
    (["A=1", "=x"], "entry 1 '=x' has an empty name"),
    (["A B=1"], "entry 0 'A B=1': a name holds no spaces"),
    (["A=\x00"], "entry 0 'A=\\x00': a name holds no spaces, and no entry a NUL"),
    ([3], "entry 0: expected a 'NAME=value' string, got 3"),
    ("A=1", "expected a list of 'NAME=value' strings, got 'A=1'"),
    ({"cpu": ["A"]}, "cpu: entry 0 'A' has no '='"),
    ({"tpu": ["A=1"]}, "unknown device 'tpu'"),
    ({"gpu": [], "cuda": []}, "give 'cuda' or its older name 'gpu', not both"),
    (["DET_MASTER=http://x"], "entry 0: DET_MASTER is set by det_sdk for every task and "
                              "cannot be overridden"),
    (["DET_SESSION_TOKEN=t"], "entry 0: DET_SESSION_TOKEN is set by det_sdk"),
    (["HOROVOD_GLOO_IFACE=lo"], "entry 0: HOROVOD_GLOO_IFACE is set by det_sdk"),
    (["SLURM_NTASKS=4"], "entry 0: SLURM_NTASKS is set by det_sdk"),
    (["PATH=/opt/bin"], "entry 0: PATH is set by det_sdk"),
    ({"cuda": ["DET_X=1"]}, "cuda: entry 0: DET_X is set by det_sdk"),
])
def test_bad_environment_variables_are_refused_naming_the_entry(value, expected):
    msg = _error(parse_experiment_config, _env(value))
    assert f"  environment.environment_variables: {expected}" in msg


def test_a_misspelled_environment_field_is_an_error():
    msg = _error(parse_experiment_config, {"environment": {"enviroment_variables": []}})
    assert "environment.enviroment_variables: unknown field (did you mean " \
           "'environment_variables'?)" in msg


def test_local_runs_apply_environment_variables_where_the_shell_did_not():
    cfg = parse_experiment_config(_env(["FROM_CONFIG=1", "IN_SHELL=config"]))
    environ = {"IN_SHELL": "shell"}
    assert apply_environment_variables(cfg, environ) == {"FROM_CONFIG": "1"}
    assert environ == {"IN_SHELL": "shell", "FROM_CONFIG": "1"}  # the shell wins
    assert apply_environment_variables(None, environ) == {}


def test_task_processes_get_the_config_variables_under_det_sdks_own():
    from det_sdk.master.resources import process_env, task_env

    cfg = parse_experiment_config({**_env(["DATA=/data", "OMP_NUM_THREADS=1"]),
                                   "entrypoint": "python3 train.py"})
    env = task_env({"DET_TRIAL_ID": "3", "DET_EXPERIMENT_CONFIG": cfg.model_dump(mode="json")})
    full = process_env(env, "http://m", "tok", "trial-3-x", "TRIAL",
                       base={"PATH": "/usr/bin", "OMP_NUM_THREADS": "8", "HOME": "/h"})
    assert full["DATA"] == "/data" and full["OMP_NUM_THREADS"] == "1"  # over the master's
    assert full["HOME"] == "/h" and full["DET_SESSION_TOKEN"] == "tok"
    assert full["PATH"].endswith("/usr/bin")
    # nothing of a run, a rank or the user's login in the master's shell reaches a task
    leaky = {"DET_RESUME": "3", "DET_RUNS_DIR": "/r", "DET_USER_TOKEN": "u", "RANK": "1",
             "HOROVOD_RANK": "1", "TF_CONFIG": "{}", "DET_HPARAMS": '{"old": 1}'}
    full = process_env(task_env({"DET_TRIAL_ID": "3"}), "http://m", "tok", "a", "TRIAL",
                       base={"PATH": "/usr/bin", **leaky})
    assert not set(leaky) & set(full) and full["DET_TRIAL_ID"] == "3"
    # a stored config altered since its create (it was checked then): the launch fails
    env["DET_EXPERIMENT_CONFIG"] = json.dumps(_env(["DET_SESSION_TOKEN=stolen", "X=1"]))
    with pytest.raises(ConfigError, match="DET_SESSION_TOKEN is set by det_sdk"):
        process_env(env, "http://m", "tok", "a", "TRIAL", base={})


def test_det_core_init_applies_environment_variables_locally(tmp_path, monkeypatch):
    import det_sdk as det

    monkeypatch.delenv("DET_ALLOCATION_ID", raising=False)
    monkeypatch.setenv("SHELL_SET", "shell")
    monkeypatch.delenv("CONFIG_SET", raising=False)
    path = tmp_path / "c.yaml"
    path.write_text("hyperparameters: {lr: 1e-3}\nenvironment:\n  environment_variables:\n"
                    "    cpu: [CONFIG_SET=config, SHELL_SET=config]\n    cuda: [CUDA_ONLY=1]\n")
    with det.core.init(config=path, runs_dir=tmp_path / "runs") as core_context:
        assert core_context.hparams["lr"] == 0.001
    assert os.environ["CONFIG_SET"] == "config" and os.environ["SHELL_SET"] == "shell"
    assert "CUDA_ONLY" not in os.environ  # det_sdk's slots are CPUs
