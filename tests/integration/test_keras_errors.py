"""det_sdk.keras with bad input: each mistake fails early, with the right type and a clear message.

Real TensorFlow, in this one process: tiny models and tiny numpy data.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import xxhash

import det_sdk as det
from det_sdk.config import ConfigError
from det_sdk.core import Context
from det_sdk.distributed import SingleProcess
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.info import ClusterInfo
from det_sdk.keras import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    KerasContext,
    ShardedArray,
)
from det_sdk.session import LocalSession

HPARAMS = {"learning_rate": 0.05, "global_batch_size": 8}


def _model(compiled: bool = True, metrics=None) -> tf.keras.Model:
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    if compiled:
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", metrics=metrics)
    return model


def _data(n: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = rng.normal(size=(n, 1)).astype("float32")
    return x, y


class Batches(tf.keras.utils.Sequence):
    def __init__(self, x, y, bs=4):
        super().__init__()
        self.x, self.y, self.bs = x, y, bs

    def __len__(self):
        return (len(self.x) + self.bs - 1) // self.bs

    def __getitem__(self, i):
        return self.x[i * self.bs:(i + 1) * self.bs], self.y[i * self.bs:(i + 1) * self.bs]


@pytest.fixture
def ctx(tmp_path):
    context = det.keras.init(runs_dir=tmp_path / "runs", hparams=HPARAMS, seed=1)
    yield context
    context.close()


@pytest.fixture(scope="module")
def trained_runs(tmp_path_factory):
    """A runs directory whose run 1 trained one epoch and holds one checkpoint."""
    runs = tmp_path_factory.mktemp("trained") / "runs"
    context = det.keras.init(runs_dir=runs, hparams=HPARAMS, seed=1)
    x, y = _data()
    model = _model()
    context.fit(model, x=x, y=y, batch_size=8, epochs=1, validation_data=_data(4, 1), verbose=0)
    context.close()
    (uuid,) = context.core._session.storage.list()
    return runs, uuid


@pytest.fixture
def trained_copy(trained_runs, tmp_path):
    """A private copy of ``trained_runs`` (to corrupt) and a context in it."""
    src, uuid = trained_runs
    runs = tmp_path / "runs"
    shutil.copytree(src, runs)
    context = det.keras.init(runs_dir=runs, hparams=HPARAMS, seed=1)
    yield context, runs / "1" / "checkpoints" / uuid, uuid
    context.close()


# --- wrap_data: bad input -------------------------------------------------------------------


def test_wrap_data_mismatched_lengths_lists_both(ctx):
    x, _ = _data(10)
    _, y = _data(9)
    with pytest.raises(ValueError) as info:
        ctx.wrap_data(x, y)
    msg = str(info.value)
    assert "different numbers of samples" in msg
    assert "x: 10" in msg
    assert "y: 9" in msg


def test_wrap_data_mismatched_sample_weight(ctx):
    x, y = _data(10)
    with pytest.raises(ValueError, match="sample_weight: 7"):
        ctx.wrap_data(x, y, np.ones(7))


@pytest.mark.parametrize("x", [[1, 2, 3], "not data", 5], ids=["list-of-ints", "str", "int"])
def test_wrap_data_unsupported_type(ctx, x):
    with pytest.raises(TypeError) as info:
        ctx.wrap_data(x)
    msg = str(info.value)
    assert "expected numpy arrays" in msg
    assert f"got {type(x).__name__}" in msg


def test_wrap_data_y_not_an_array(ctx):
    x, _ = _data(3)
    with pytest.raises(TypeError, match=r"y\[0\] must be a numpy array.*got int"):
        ctx.wrap_data(x, [1, 2, 3])


def test_wrap_data_none(ctx):
    with pytest.raises(TypeError, match="x is required"):
        ctx.wrap_data(None)


def test_wrap_data_empty_arrays(ctx):
    with pytest.raises(ValueError, match=r"empty \(0 samples\)"):
        ctx.wrap_data(np.zeros((0, 4), "float32"), np.zeros((0, 1), "float32"))
    with pytest.raises(ValueError, match=r"empty \(0 samples\)"):
        ctx.wrap_data(np.zeros((0, 4), "float32"))


def test_wrap_data_scalar_array(ctx):
    with pytest.raises(ValueError, match="scalar"):
        ctx.wrap_data(np.array(3.0))


def test_wrap_data_dataset_with_y(ctx):
    x, y = _data(8)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    with pytest.raises(ValueError, match=r"tf\.data\.Dataset, pass only the dataset"):
        ctx.wrap_data(ds, y)
    with pytest.raises(ValueError, match=r"tf\.data\.Dataset"):
        ctx.wrap_data(ds, sample_weight=np.ones(8))


def test_wrap_data_sequence_with_y(ctx):
    x, y = _data(8)
    with pytest.raises(ValueError, match=r"keras\.utils\.Sequence, pass only the sequence"):
        ctx.wrap_data(Batches(x, y), y)


def test_wrap_data_empty_sequence(ctx):
    x, y = _data(0)
    with pytest.raises(ValueError, match=r"Sequence is empty"):
        ctx.wrap_data(Batches(x, y))


# --- wrap_data: returns the kind it was given -------------------------------------------


def test_wrap_data_returns_same_kinds(ctx):
    x, y = _data(6)
    w = np.arange(6, dtype="float32")

    pair = ctx.wrap_data(x, y)
    assert isinstance(pair, tuple) and len(pair) == 2
    assert isinstance(pair[0], ShardedArray)
    np.testing.assert_array_equal(pair[0], x)
    np.testing.assert_array_equal(pair[1], y)

    triple = ctx.wrap_data(x, y, w)
    assert isinstance(triple, tuple) and len(triple) == 3
    np.testing.assert_array_equal(triple[2], w)

    alone = ctx.wrap_data(x)
    assert isinstance(alone, np.ndarray) and not isinstance(alone, tuple)
    assert alone.shape == x.shape

    as_dict = ctx.wrap_data({"a": x, "b": x[:, :2]})
    assert isinstance(as_dict, dict) and set(as_dict) == {"a", "b"}
    np.testing.assert_array_equal(as_dict["b"], x[:, :2])

    dict_and_y = ctx.wrap_data({"a": x}, y)
    assert isinstance(dict_and_y, tuple) and isinstance(dict_and_y[0], dict)

    as_list = ctx.wrap_data([x, x[:, :1]])
    assert isinstance(as_list, list) and len(as_list) == 2
    np.testing.assert_array_equal(as_list[1], x[:, :1])


def test_wrap_data_dataset_and_sequence_come_back_as_is(ctx):
    x, y = _data(8)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    seq = Batches(x, y)
    assert ctx.wrap_data(ds) is ds
    assert ctx.wrap_data(seq) is seq


# --- fit: bad input fails before training --------------------------------------------------


def _no_checkpoint(context) -> bool:
    run_dir = context.core.local_run_dir
    return context.core._session.storage.list() == [] \
        and not (run_dir / "checkpoints.jsonl").exists()


def test_fit_with_validation_data_and_x_val(ctx):
    x, y = _data()
    with pytest.raises(ValueError, match="either validation_data or x_val/y_val, not both"):
        ctx.fit(_model(), x=x, y=y, validation_data=(x, y), x_val=x, y_val=y, verbose=0)
    assert _no_checkpoint(ctx)


def test_fit_with_y_val_but_no_x_val(ctx):
    x, y = _data()
    with pytest.raises(ValueError, match="y_val was given without x_val"):
        ctx.fit(_model(), x=x, y=y, y_val=y, verbose=0)


def test_fit_uncompiled_model(ctx):
    x, y = _data()
    with pytest.raises(ValueError, match="compile the model first"):
        ctx.fit(_model(compiled=False), x=x, y=y, validation_data=(x, y), verbose=0)


def test_fit_not_a_model(ctx):
    x, y = _data()
    with pytest.raises(TypeError, match=r"model must be a keras\.Model, got str"):
        ctx.fit("model", x=x, y=y, validation_data=(x, y))


@pytest.mark.parametrize("split", [1.5, -0.2, 1.0])
def test_fit_validation_split_out_of_range(ctx, split):
    x, y = _data()
    with pytest.raises(ValueError, match=r"validation_split must be in \(0, 1\)"):
        ctx.fit(_model(), x=x, y=y, validation_split=split, verbose=0)
    assert _no_checkpoint(ctx)


def test_fit_validation_split_that_leaves_an_empty_set(ctx):
    x, y = _data(4)
    with pytest.raises(ValueError, match="of 4 samples leaves an empty training"):
        ctx.fit(_model(), x=x, y=y, validation_split=0.9, verbose=0)


def test_fit_with_x_val_y_val_trains(ctx):
    x, y = ctx.wrap_data(*_data())
    x_val, y_val = _data(4, 1)
    model = _model()
    before = model.get_weights()[0].copy()
    history = ctx.fit(model, x=x, y=y, batch_size=8, epochs=2, x_val=x_val, y_val=y_val,
                      verbose=0)
    assert history.epoch == [0, 1]
    assert len(history.history["val_loss"]) == 2
    assert all(np.isfinite(history.history["val_loss"]))
    assert not np.array_equal(before, model.get_weights()[0])
    groups = [r["group"] for r in ctx.core._session.read_metrics()]
    assert groups.count("validation") == 2
    assert len(ctx.core._session.storage.list()) >= 1


# --- the rest of the context --------------------------------------------------------------


@pytest.mark.parametrize("bad", ["sgd", None, tf.keras.losses.MeanSquaredError()],
                         ids=["str", "none", "loss"])
def test_wrap_optimizer_with_a_non_optimizer(ctx, bad):
    with pytest.raises(TypeError, match=f"expected a keras optimizer instance, got "
                                        f"{type(bad).__name__}"):
        ctx.wrap_optimizer(bad)


def test_wrap_optimizer_returns_a_usable_optimizer(ctx):
    opt = tf.keras.optimizers.SGD(0.01)
    assert ctx.wrap_optimizer(opt) is opt


def test_missing_hparam_is_a_key_error_listing_known_ones(ctx):
    with pytest.raises(KeyError) as info:
        ctx.training.hparams["missing"]
    msg = str(info.value)
    assert "'missing' is not defined" in msg
    assert "global_batch_size" in msg and "learning_rate" in msg
    assert ctx.training.hparams["learning_rate"] == 0.05


def test_init_searched_hparam_without_default(tmp_path):
    config = {"hyperparameters": {"units": {"type": "int", "minval": 1, "maxval": 8}}}
    with pytest.raises(ValueError, match=r"units \(int\)"):
        det.keras.init(runs_dir=tmp_path, hparams={"lr": 0.1}, config=config, seed=1)
    assert list(tmp_path.iterdir()) == []  # no run was created


def test_init_searched_hparam_with_default(tmp_path):
    config = {"hyperparameters": {"units": {"type": "int", "minval": 1, "maxval": 8},
                                  "dropout": 0.5}}
    context = det.keras.init(runs_dir=tmp_path, hparams={"units": 4, "dropout": 0.1},
                             config=config, seed=1)
    try:
        assert context.hparams.to_dict() == {"units": 4, "dropout": 0.5}
    finally:
        context.close()


@pytest.mark.parametrize("seed", [-1, 2**31, 1.5, True, "1"])
def test_init_bad_seed(tmp_path, seed):
    with pytest.raises(ValueError, match="seed must be an int in"):
        det.keras.init(runs_dir=tmp_path, hparams=HPARAMS, seed=seed)
    assert not tmp_path.joinpath("1").exists()


def test_init_config_file_missing(tmp_path):
    path = tmp_path / "no-such-config.yaml"
    with pytest.raises(ConfigError) as info:
        det.keras.init(runs_dir=tmp_path / "runs", config=str(path), seed=1)
    assert str(path) in str(info.value)
    assert "not found" in str(info.value)


def test_init_config_of_wrong_type(tmp_path):
    with pytest.raises(TypeError, match="config must be a path"):
        det.keras.init(runs_dir=tmp_path, config=42, seed=1)


def test_init_bad_checkpoint_period(tmp_path):
    with pytest.raises(ConfigError, match="checkpoint_period"):
        det.keras.init(runs_dir=tmp_path, seed=1, checkpoint_period={"epochs": 1, "batches": 1})
    with pytest.raises(TypeError, match="checkpoint_period must be"):
        det.keras.init(runs_dir=tmp_path, seed=1, checkpoint_period=3)


def test_load_checkpoint_model_needs_exactly_one_id(ctx):
    with pytest.raises(ValueError, match="exactly one of trial_id or checkpoint_uuid"):
        ctx.load_checkpoint_model()
    with pytest.raises(ValueError, match="exactly one of trial_id or checkpoint_uuid"):
        ctx.load_checkpoint_model(trial_id=1, checkpoint_uuid="abc")


def test_load_checkpoint_model_unknown_trial(ctx):
    with pytest.raises(LookupError, match=r"\b99\b"):
        ctx.load_checkpoint_model(trial_id=99)


def test_load_checkpoint_model_unknown_uuid(ctx):
    with pytest.raises(LookupError, match="no checkpoint 'nope'"):
        ctx.load_checkpoint_model(checkpoint_uuid="nope")


def test_load_checkpoint_model_of_a_run_without_checkpoint(ctx):
    with pytest.raises(LookupError, match="has no checkpoint"):
        ctx.load_checkpoint_model(trial_id=ctx.trial_id)


def test_load_checkpoint_model_intact(trained_copy):
    context, _, uuid = trained_copy
    by_trial = context.load_checkpoint_model(trial_id=1)
    by_uuid = context.load_checkpoint_model(checkpoint_uuid=uuid)
    for a, b in zip(by_trial.get_weights(), by_uuid.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert by_trial.optimizer is not None


def test_corrupt_checkpoint_truncated_state(trained_copy):
    context, path, uuid = trained_copy
    state = path / "state.bin"
    size = state.stat().st_size
    with open(state, "r+b") as f:
        f.truncate(size // 2)
    pattern = r"state\.bin holds \d+ bytes, its index says \d+ \(truncated"
    with pytest.raises(CheckpointCorruptError, match=pattern):
        context.load_checkpoint_model(checkpoint_uuid=uuid)
    with pytest.raises(CheckpointCorruptError, match="truncated"):
        context.load_checkpoint_model(trial_id=1)


def test_corrupt_checkpoint_garbage_metadata(trained_copy):
    context, path, uuid = trained_copy
    (path / "metadata.json").write_bytes(b"\x00\xffnot json{{")
    with pytest.raises(CheckpointCorruptError, match=r"metadata\.json is unreadable"):
        context.load_checkpoint_model(checkpoint_uuid=uuid)


def test_corrupt_checkpoint_metadata_not_an_object(trained_copy):
    context, path, uuid = trained_copy
    (path / "metadata.json").write_text("[1, 2]")
    with pytest.raises(CheckpointCorruptError, match=r"metadata\.json"):
        context.load_checkpoint_model(checkpoint_uuid=uuid)


def test_corrupt_checkpoint_missing_model_json(trained_copy):
    context, path, uuid = trained_copy
    os.remove(path / "model.json")
    with pytest.raises(CheckpointCorruptError, match=r"incomplete: model\.json is missing"):
        context.load_checkpoint_model(checkpoint_uuid=uuid)


def test_corrupt_checkpoint_error_names_the_checkpoint(trained_copy):
    context, path, uuid = trained_copy
    os.remove(path / "state.json")
    with pytest.raises(CheckpointCorruptError) as info:
        context.load_checkpoint_model(checkpoint_uuid=uuid)
    assert uuid in str(info.value)
    assert "state.json" in str(info.value)


def test_altered_state_of_the_same_size_is_refused_by_its_checksum(trained_copy):
    context, path, uuid = trained_copy
    state = path / "state.bin"
    state.write_bytes(np.random.default_rng(0).bytes(state.stat().st_size))
    with pytest.raises(CheckpointCorruptError, match=r"state\.bin does not match its checksum"):
        context.load_checkpoint_model(checkpoint_uuid=uuid)


def test_edited_model_json_is_refused_by_its_checksum(trained_copy):
    context, path, uuid = trained_copy
    spec = json.loads((path / "model.json").read_text())
    (path / "model.json").write_text(json.dumps(spec, indent=2))  # same content, other bytes
    with pytest.raises(CheckpointCorruptError, match=r"model\.json does not match"):
        context.load_checkpoint_model(checkpoint_uuid=uuid)


def test_checkpoint_of_the_other_keras_major_is_refused(trained_copy):
    """As a genuine checkpoint of the other Keras would be: consistent checksums."""
    context, path, uuid = trained_copy
    meta = json.loads((path / "metadata.json").read_text())
    other = 2 if meta["keras_major"] == 3 else 3
    data = json.dumps({**meta, "keras_major": other}).encode()
    (path / "metadata.json").write_bytes(data)
    sums = json.loads((path / "checksums.json").read_text())
    sums["files"]["metadata.json"] = xxhash.xxh3_64_hexdigest(data)
    (path / "checksums.json").write_text(json.dumps(sums))
    with pytest.raises(CheckpointMismatchError, match=f"saved by Keras {other}.*Load it with "
                                                      f"Keras {other}"):
        context.load_checkpoint_model(checkpoint_uuid=uuid)


def test_evaluate_returns_what_keras_returns_and_records_it(ctx):
    x, y = _data()
    model = _model(metrics=["mae"])
    expected = model.evaluate(x, y, verbose=0)
    assert isinstance(expected, list) and len(expected) == 2

    got = ctx.evaluate(model, x, y, verbose=0)
    assert isinstance(got, list)
    assert got == pytest.approx(expected)

    as_dict = ctx.evaluate(model, x, y, verbose=0, return_dict=True)
    assert as_dict == pytest.approx(model.evaluate(x, y, verbose=0, return_dict=True))
    assert list(as_dict) == ["loss", "mae"]

    rows = [json.loads(line) for line in
            Path(ctx.core.local_run_dir, "metrics.jsonl").read_text().splitlines()]
    evaluation = [r for r in rows if r["group"] == "evaluation"]
    assert len(evaluation) == 2
    assert evaluation[0]["metrics"] == pytest.approx({"loss": expected[0], "mae": expected[1]})
    assert evaluation[0]["steps_completed"] == 0


def test_evaluate_without_metrics_returns_a_scalar(ctx):
    x, y = _data()
    model = _model()
    expected = model.evaluate(x, y, verbose=0)
    got = ctx.evaluate(model, x, y, verbose=0)
    assert isinstance(got, float)
    assert got == pytest.approx(expected)


def test_training_without_hparams_is_a_runtime_error(tmp_path):
    session = LocalSession.create(tmp_path, hparams={}, seed=1, config={})
    info = ClusterInfo(master_url="", session_token="", allocation_id="local",
                       task_type="GENERIC")
    context = KerasContext(
        core=Context(distributed=SingleProcess(), session=session, info=info, config=None),
        hparams=None,
        config_data={"trial_id": 777},
        policy=TrainingPolicy(seed=1, checkpoint_period=None),
    )
    try:
        with pytest.raises(RuntimeError, match="not available in a generic job"):
            context.training  # noqa: B018
        with pytest.raises(RuntimeError, match=r"context\.config_data"):
            context.hparams  # noqa: B018
        assert context.config_data == {"trial_id": 777}
    finally:
        context.close()
