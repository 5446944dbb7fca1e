"""Determined's TFKerasTrial API on det_sdk (det_sdk.keras.TFKerasTrial and its runner).

Fast tests run tiny trials in this process (each data kind a loader may return, the
context's getters and wrappers, the errors). The slow ones run the seed tutorial's
MNISTTrial (examples/mnist_trial) with `python -m det_sdk.keras.trial` and on a real
master with 1 and 2 slots, pause and activate it, and read its metrics and
checkpoints back through the `det` CLI.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_trial_api.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import yaml

from det_sdk.config import ConfigError
from det_sdk.keras import (
    InMemorySequence,
    SequenceAdapter,
    TFKerasTensorBoard,
    TFKerasTrial,
    TFKerasTrialContext,
    _compat,
    run_trial,
)
from det_sdk.keras._trial import TrialLoadError, load_trial_class
from det_sdk.keras.trial import main
from tests.support import read_jsonl

keras = _compat.keras


def _config(**overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "hyperparameters": {"global_batch_size": 8},
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 6}},
        "reproducibility": {"experiment_seed": 1},
        "entrypoint": "t:Trial",
    }
    cfg.update(overrides)
    return cfg


rng = np.random.default_rng(0)


X = rng.normal(size=(40, 4)).astype("float32")


Y = (X.sum(axis=1) > 0).astype("float32")


def _model(context: TFKerasTrialContext, optimizer: Any = "adam") -> Any:
    model = context.wrap_model(keras.Sequential([
        keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")]))
    model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    return model


class NumpyTrial(TFKerasTrial):
    """Loaders given per test through the config's data section's `kind`."""

    def build_model(self) -> Any:
        self.model = _model(self.context)
        self.initial = [w.copy() for w in self.model.get_weights()]
        return self.model

    def build_training_data_loader(self) -> Any:
        return loader(self.context, self.context.get_data_config()["kind"])

    def build_validation_data_loader(self) -> Any:
        return X[:16], Y[:16]


class Batches(keras.utils.Sequence):
    def __init__(self, n: int = 5) -> None:
        super().__init__()
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return X[i * 8:(i + 1) * 8], Y[i * 8:(i + 1) * 8]


def loader(context: TFKerasTrialContext, kind: str) -> Any:
    bs = context.get_per_slot_batch_size()
    if kind == "zero_weights":
        return X, Y, np.zeros(len(X), "float32")
    if kind == "weights":
        return X, Y, np.ones(len(X), "float32")
    if kind == "dataset":
        return context.wrap_dataset(tf.data.Dataset.from_tensor_slices((X, Y))).batch(bs)
    if kind == "sequence":
        return Batches()
    if kind == "adapter":
        return SequenceAdapter(Batches(), workers=2, use_multiprocessing=True)
    if kind == "in_memory":
        return InMemorySequence(data=X, labels=Y, batch_size=context.get_global_batch_size())
    if kind == "list":
        return [X, Y]
    if kind == "unwrapped_dataset":
        return tf.data.Dataset.from_tensor_slices((X, Y)).batch(bs)
    raise AssertionError(kind)


def _run(tmp_path: Path, trial: type[TFKerasTrial] = NumpyTrial, **overrides: Any) -> Any:
    return run_trial(trial, config=_config(**overrides), runs_dir=tmp_path / "runs")


@pytest.mark.parametrize("kind", ["weights", "dataset", "sequence", "adapter", "in_memory"])
def test_each_data_kind_trains_to_the_configured_length(tmp_path: Path, kind: str) -> None:
    hist = _run(tmp_path, data={"kind": kind})
    run = tmp_path / "runs" / "1"
    ckpts = read_jsonl(run / "checkpoints.jsonl")
    assert ckpts[-1]["steps_completed"] == 6  # searcher.max_length: 6 batches, exactly
    validations = [m for m in read_jsonl(run / "metrics.jsonl") if m["group"] == "validation"]
    assert validations and {"val_loss", "val_accuracy"} <= set(validations[-1]["metrics"])
    assert hist.history["val_loss"]


def test_a_length_in_epochs_counts_passes_over_the_training_data(tmp_path: Path) -> None:
    _run(tmp_path, searcher={"name": "single", "metric": "val_accuracy",
                             "smaller_is_better": False, "max_length": {"epochs": 2}},
         data={"kind": "in_memory"})
    run = tmp_path / "runs" / "1"
    # 40 rows in global batches of 8: 5 steps an epoch; validated at each epoch's end
    assert read_jsonl(run / "checkpoints.jsonl")[-1]["steps_completed"] == 10
    assert [(m["epoch"], m["steps_completed"]) for m in read_jsonl(run / "metrics.jsonl")
            if m["group"] == "validation"] == [(1, 5), (2, 10)]


def test_sample_weights_from_the_loader_are_used(tmp_path: Path) -> None:
    trials: list[Any] = []

    class Keep(NumpyTrial):
        def __init__(self, context: TFKerasTrialContext) -> None:
            super().__init__(context)
            trials.append(self)

    _run(tmp_path, Keep, data={"kind": "zero_weights"})
    _run(tmp_path, Keep, data={"kind": "weights"})
    zero, ones = trials
    # weight 0 everywhere: no gradient, the weights stay; weight 1: they move
    for before, after in zip(zero.initial, zero.model.get_weights()):
        np.testing.assert_array_equal(before, after)
    assert any(not np.array_equal(b, a) for b, a in zip(ones.initial, ones.model.get_weights()))


def test_in_memory_sequence_batches_and_checks() -> None:
    w = np.arange(40, dtype="float32")
    seq = InMemorySequence(data=X, labels=Y, batch_size=16, sample_weights=w)
    assert len(seq) == 3 and isinstance(seq, keras.utils.Sequence)
    x, _, sw = seq[2]
    assert len(x) == 8 and list(sw) == list(w[32:])
    with pytest.raises(IndexError):
        seq[3]
    with pytest.raises(ValueError, match="batch_size"):
        InMemorySequence(data=X, labels=Y, batch_size=0)
    with pytest.raises(ValueError, match="data: 40, labels: 39"):
        InMemorySequence(data=X, labels=Y[:39], batch_size=4)
    with pytest.raises(TypeError, match="labels must be a numpy array"):
        InMemorySequence(data=X, labels="y", batch_size=4)
    with pytest.raises(ValueError, match="workers"):
        SequenceAdapter(seq, workers=-1)
    with pytest.raises(TypeError, match=r"keras\.utils\.Sequence"):
        SequenceAdapter([1, 2])


def test_context_getters_and_the_optimizer_wrapped_at_compile(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    seen: dict[str, Any] = {}

    class Probe(NumpyTrial):
        def build_model(self) -> Any:
            c = self.context
            seen.update(hparams=c.get_hparams(), lr=c.get_hparam("lr"),
                        gbs=c.get_global_batch_size(), per_slot=c.get_per_slot_batch_size(),
                        data=c.get_data_config(), config=c.get_experiment_config(),
                        rank=c.distributed.rank, trial=c.get_trial_id(),
                        sizes=(c.distributed.get_size(), c.distributed.get_rank(),
                               c.distributed.get_local_size(), c.distributed.size),
                        experiment=c.get_experiment_id())
            model = super().build_model()
            seen["optimizer"] = model.optimizer
            with pytest.raises(KeyError, match="global_batch_size"):
                c.get_hparam("nope")
            return model

    with caplog.at_level("WARNING", logger="det_sdk.config"):
        _run(tmp_path, Probe, hyperparameters={"global_batch_size": 8, "lr": 0.1},
             data={"kind": "weights"}, environment={"image": "x"})
    (said,) = [r.getMessage() for r in caplog.records if r.name == "det_sdk.config"]
    assert said.endswith("which it does not implement: environment.image")
    assert seen["hparams"] == {"global_batch_size": 8, "lr": 0.1}
    assert (seen["lr"], seen["gbs"], seen["per_slot"], seen["rank"]) == (0.1, 8, 8, 0)
    assert seen["data"] == {"kind": "weights"} and seen["trial"] == 1
    assert seen["experiment"] is None and seen["sizes"] == (1, 0, 1, 1)
    assert seen["config"]["entrypoint_script"] == "python3 -m det_sdk.launch.trial t:Trial"
    # compile(optimizer="adam") on a wrapped model: a real Adam, and checkpointed
    assert isinstance(seen["optimizer"], keras.optimizers.Adam)
    state = json.loads(next((tmp_path / "runs" / "1" / "checkpoints").glob("*/state.json"))
                       .read_text())
    groups = {a["group"] for a in state["arrays"]}
    assert "optimizer:0" in groups, f"no optimizer state in the checkpoint: {groups}"


def test_records_per_epoch_other_than_the_data_says_what_an_epoch_is(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="det_sdk.keras"):
        _run(tmp_path, records_per_epoch=60000, data={"kind": "in_memory"})
    assert "records_per_epoch is 60000 but the training data has 40 records" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="det_sdk.keras"):
        _run(tmp_path, records_per_epoch=40, data={"kind": "in_memory"})
    assert "records_per_epoch" not in caplog.text


def test_tensorboard_callback_writes_into_the_run(tmp_path: Path) -> None:
    class WithTensorBoard(NumpyTrial):
        def keras_callbacks(self) -> list[Any]:
            return [TFKerasTensorBoard(update_freq="epoch")]

    _run(tmp_path, WithTensorBoard, data={"kind": "weights"})
    events = list((tmp_path / "runs" / "1" / "tensorboard" / "keras").rglob("events.out.*"))
    assert events, "TFKerasTensorBoard wrote nothing into the run's tensorboard/keras"


def test_a_model_not_wrapped_is_refused_naming_wrap_model(tmp_path: Path) -> None:
    class Unwrapped(NumpyTrial):
        def build_model(self) -> Any:
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse")
            return model

    class CompiledFirst(NumpyTrial):
        def build_model(self) -> Any:
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse")
            return self.context.wrap_model(model)

    with pytest.raises(ValueError, match=r"self\.context\.wrap_model"):
        _run(tmp_path, Unwrapped, data={"kind": "weights"})
    with pytest.raises(ValueError, match=r"compiled before self\.context\.wrap_model"):
        _run(tmp_path, CompiledFirst, data={"kind": "weights"})


def test_bad_loader_output_and_missing_settings_name_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"NumpyTrial\.build_training_data_loader returned list"):
        _run(tmp_path, data={"kind": "list"})
    with pytest.raises(ValueError, match=r"ds = self\.context\.wrap_dataset\(ds\)"):
        _run(tmp_path, data={"kind": "unwrapped_dataset"})
    with pytest.raises(KeyError, match=r"hyperparameters\.global_batch_size"):
        _run(tmp_path, hyperparameters={}, data={"kind": "weights"})
    with pytest.raises(ConfigError, match=r"searcher\.max_length"):
        _run(tmp_path, searcher={"name": "single", "metric": "val_loss"},
             data={"kind": "weights"})


def test_runner_entrypoint_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "mod.py").write_text("class NotATrial:\n    pass\n")
    assert main(["mod:NotATrial", "--context", str(tmp_path), "--config", "x.yaml"]) == 2
    assert "not a subclass of det_sdk.keras.TFKerasTrial" in capsys.readouterr().err
    assert main(["nomodule:X", "--context", str(tmp_path)]) == 2
    assert "no module 'nomodule'" in capsys.readouterr().err
    with pytest.raises(TrialLoadError, match="expected module:Class"):
        load_trial_class("just_a_name")
    assert main(["mod:NotATrial", "--hparams", "[1]", "--context", str(tmp_path)]) == 2
    assert "JSON object" in capsys.readouterr().err
    (tmp_path / "ok.py").write_text("from det_sdk.keras import TFKerasTrial\n"
                                    "class T(TFKerasTrial):\n    pass\n")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(_config()))
    assert main(["ok:T", "--context", str(tmp_path), "--config", str(config), "--resume", "7",
                 "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "no local run 7" in capsys.readouterr().err


def test_a_trial_reads_nested_hyperparameters_as_dicts(tmp_path: Path) -> None:
    """Issue 23: Determined's nested hyperparameters through TFKerasTrialContext."""
    seen: dict[str, Any] = {}

    class Nested(NumpyTrial):
        def build_model(self) -> Any:
            c = self.context
            opt = c.get_hparam("optimizer")
            seen.update(opt=opt, all=c.get_hparams(), units=opt["dense"]["units"])
            with pytest.raises(KeyError, match=r"'optimizer\.momentum' is not defined"):
                opt["momentum"]
            self.model = _model(c, keras.optimizers.SGD(**{k: opt[k] for k in
                                                           ("learning_rate", "nesterov")}))
            return self.model

    _run(tmp_path, Nested, data={"kind": "weights"}, hyperparameters={
        "global_batch_size": 8,
        "optimizer": {"learning_rate": 0.05, "nesterov": True, "dense": {"units": 3}}})
    assert isinstance(seen["opt"], dict) and seen["units"] == 3
    assert seen["all"] == {"global_batch_size": 8, "optimizer": {
        "learning_rate": 0.05, "nesterov": True, "dense": {"units": 3}}}
    run = json.loads((tmp_path / "runs" / "1" / "run.json").read_text())
    assert run["hparams"]["optimizer"]["dense"] == {"units": 3}
