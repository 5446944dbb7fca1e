"""Issue 10: a script that trains on one process trains the same on N (`horovodrun -np 2`).

tests/scripts/hvd_same_on_n.py runs each case once under 2 processes and once as one
process (the reference); the tests read its JSON reports. Cases that need no second
process (checkpoint weights into a subclassed model, run ids, retention, stopping
before fit, resuming random draws) run here or as one script.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_sdk as det
from det_sdk.keras import _compat
from tests.conftest import SCRIPTS, run_python
from tests.test_horovod import HOROVODRUN, horovodrun

keras = tf.keras
SCRIPT = SCRIPTS / "hvd_same_on_n.py"
N = 33


def _run(tmp: Path, processes: int) -> dict:
    env = {"SAME_DIR": str(tmp), "SAME_OUT": str(tmp / "out.json"),
           "DET_RUNS_DIR": str(tmp / "runs")}
    proc = horovodrun(SCRIPT, env, timeout=300) if processes > 1 else run_python(
        SCRIPT, env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads((tmp / "out.json").read_text())


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not HOROVODRUN.exists():
        pytest.skip("horovodrun not installed")
    return _run(tmp_path_factory.mktemp("two"), 2)


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _run(tmp_path_factory.mktemp("one"), 1)


slow = pytest.mark.slow


@slow
def test_arrays_derived_from_wrapped_views_train_every_sample_once(two: dict) -> None:
    # 16 and 17 rows per process: 4 and 5 batches, padded to 5 (was refused: "rank 0: 4,
    # rank 1: 5 steps")
    assert two["size"] == 2
    assert two["derived_seen"] == list(range(N))
    a, b = two["derived_checksums"]
    assert a == b


@slow
@pytest.mark.parametrize("case", ["shuffled_seeded", "shuffled_unseeded"])
def test_a_dataset_shuffled_before_wrap_data_gives_disjoint_shards(two: dict, case: str) -> None:
    # two epochs of 32 samples: each exactly twice (processes shuffled alike, then shard)
    assert two[f"{case}_seen"] == sorted(list(range(32)) * 2)


@slow
@pytest.mark.parametrize("case", ["uneven", "uneven_steps"])
def test_a_wrapped_dataset_with_uneven_batches_is_padded_not_refused(two: dict,
                                                                      case: str) -> None:
    # 9 batches shard into 5 and 4; with steps_per_epoch=5 rank 1 used to run dry and hang
    assert two[f"{case}_seen"] == list(range(N))
    a, b = two[f"{case}_checksums"]
    assert a == b


@slow
@pytest.mark.parametrize("kind", ["dataset", "sequence", "whole_sequence"])
def test_evaluate_on_datasets_and_sequences_equals_one_process(two: dict, kind: str) -> None:
    np.testing.assert_allclose(two[f"evaluate_{kind}"], two["evaluate_reference"], rtol=1e-6)


@slow
def test_class_weight_with_numpy_trains_as_one_process(two: dict, one: dict) -> None:
    np.testing.assert_allclose(two["class_weight_loss"], one["class_weight_loss"], rtol=1e-4)
    np.testing.assert_allclose(two["class_weight_checksums"][0],
                               one["class_weight_checksums"][0], rtol=1e-4)
    a, b = two["class_weight_checksums"]
    assert a == b


@slow
def test_metrics_are_the_whole_datas_not_a_mean_of_processes(two: dict, one: dict) -> None:
    # confusion counts add up to the data (were averaged: half of it), padding not counted
    assert two["train_count_sums"] == [N, N] == one["train_count_sums"]
    assert two["val_count_sums"] == [25, 25]
    for key in ("auc", "precision", "tp"):
        np.testing.assert_allclose(two["val_last"][key], two["val_reference"][key], rtol=1e-6)
    for key, ref in two["evaluate_metrics_reference"].items():
        np.testing.assert_allclose(two["evaluate_metrics"][key], ref, rtol=1e-6, err_msg=key)


@slow
def test_lookup_and_normalization_layers_are_broadcast_and_checkpointed(two: dict) -> None:
    a, b = two["lookup_vocabularies"]
    assert a == b and len(a) == 4  # rank 1 adapted other words: rank 0's table everywhere
    pa, pb = two["lookup_predictions"]
    assert pa == pb  # Normalization adapted on other data too: rank 0's mean, re-derived
    assert two["lookup_loaded_equal"]
    assert two["lookup_loaded_vocabulary"] == a


@slow
def test_callbacks_that_write_files_run_on_rank_0_only(two: dict) -> None:
    assert two["csv_ranks"] == ["0"]
    assert two["plain_ranks"] == ["0", "1"]


@slow
def test_trial_id_is_the_run_id_on_every_process(two: dict) -> None:
    assert two["rank_trial_ids"] == [1, 1]


# --- one process: checkpoints into a script's own model, run ids, retention, stops -----------


class Subclassed(keras.Model):
    """A model Keras cannot rebuild from a config; a generator drawn in its train_step."""

    def __init__(self, noise: float = 0.0) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(1)
        self.noise = noise
        self.gen = tf.random.Generator.from_seed(5)  # a tf.random generator (Keras 2's way)
        if _compat.KERAS_MAJOR >= 3:
            self.seeds = keras.random.SeedGenerator(6)  # Keras 3's seeded generator

    def call(self, x):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y = data[0], data[1]
        x = x + self.noise * self.gen.normal(tf.shape(x))
        if _compat.KERAS_MAJOR >= 3:
            x = x + self.noise * keras.random.normal(tf.shape(x), seed=self.seeds)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 3)).astype("float32")
    return x, x[:, :1] * 2 - x[:, 1:2]


def _fit(ctx, noise: float = 0.0, epochs: int = 3, callbacks=()) -> Subclassed:
    x, y = _data()
    model = Subclassed(noise)
    model.compile(optimizer=ctx.wrap_optimizer(keras.optimizers.SGD(0.05)), loss="mse")
    ctx.fit(model, x=x, y=y, batch_size=8, epochs=epochs, validation_data=(x, y), verbose=0,
            callbacks=list(callbacks))
    return model


def test_checkpoint_weights_load_into_a_subclassed_model(tmp_path: Path) -> None:
    ctx = det.keras.init(runs_dir=tmp_path, seed=2)
    trained = _fit(ctx)
    x, _ = _data()
    with pytest.raises(Exception, match=r"load_checkpoint_weights"):
        ctx.load_checkpoint_model(trial_id=ctx.trial_id)  # Keras cannot rebuild it
    fresh = Subclassed()
    with pytest.raises(ValueError, match="build it first"):
        ctx.load_checkpoint_weights(fresh, trial_id=ctx.trial_id)
    fresh(x[:1])
    assert not np.allclose(fresh.predict(x, verbose=0), trained.predict(x, verbose=0))
    meta = ctx.load_checkpoint_weights(fresh, trial_id=ctx.trial_id, best=True)
    assert meta["epoch"] >= 1
    meta = ctx.load_checkpoint_weights(fresh, checkpoint_uuid=ctx.session.latest_checkpoint)
    assert meta["epoch"] == 3
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), trained.predict(x, verbose=0))


def test_trial_id_is_the_local_run_id(tmp_path: Path) -> None:
    assert det.keras.init(runs_dir=tmp_path, seed=1).trial_id == 1
    assert det.keras.init(runs_dir=tmp_path, seed=1).trial_id == 2


def test_local_runs_keep_latest_and_best_checkpoints(tmp_path: Path) -> None:
    ctx = det.keras.init(runs_dir=tmp_path / "default", seed=3)
    _fit(ctx, epochs=4)
    rows = [json.loads(line) for line in
            (tmp_path / "default" / "1" / "checkpoints.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4]  # the log keeps every row
    best = min(rows, key=lambda r: r["metrics"]["val_loss"])["uuid"]
    kept = {p.name for p in (tmp_path / "default" / "1" / "checkpoints").iterdir()}
    assert kept == {rows[-1]["uuid"], best}
    assert ctx.session.checkpoint_for_trial(1, best=True) == best

    ctx = det.keras.init(runs_dir=tmp_path / "two", seed=3, config={
        "checkpoint_storage": {"save_trial_latest": 2, "save_trial_best": 0}})
    _fit(ctx, epochs=4)
    kept = {p.name for p in (tmp_path / "two" / "1" / "checkpoints").iterdir()}
    assert kept == {r["uuid"] for r in ctx.session.read_checkpoints()} and len(kept) == 2
    assert [r["epoch"] for r in ctx.session.read_checkpoints()] == [3, 4]


@slow
@pytest.mark.parametrize(("sig", "code"), [("TERM", 0), ("INT", 130)])
def test_a_signal_before_fit_exits_cleanly_and_leaves_no_run(tmp_path: Path, sig: str,
                                                             code: int) -> None:
    proc = run_python(SCRIPTS / "stop_before_fit.py",
                      {"DET_RUNS_DIR": str(tmp_path), "STOP_SIGNAL": sig}, timeout=60)
    assert proc.returncode == code, proc.stderr[-3000:]
    assert "run 1" in proc.stdout and "not reached" not in proc.stdout
    assert f"stopped by SIG{sig} before training; run 1 removed" in proc.stderr
    assert not (tmp_path / "1").exists()


class _StopAfterEpoch(keras.callbacks.Callback):
    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


def test_random_draws_in_a_custom_train_step_resume_exactly(tmp_path: Path) -> None:
    tf.config.experimental.enable_op_determinism()
    whole = _fit(det.keras.init(runs_dir=tmp_path / "whole", seed=4), noise=0.5).get_weights()
    runs = tmp_path / "stopped"
    with pytest.raises(SystemExit) as stop:
        _fit(det.keras.init(runs_dir=runs, seed=4), noise=0.5, callbacks=[_StopAfterEpoch(0)])
    assert stop.value.code == 0
    resumed = _fit(det.keras.init(runs_dir=runs, resume=1), noise=0.5).get_weights()
    for a, b in zip(whole, resumed):
        np.testing.assert_array_equal(a, b)
    # the draws matter: without the noise generators' state the run ends elsewhere
    fresh = _fit(det.keras.init(runs_dir=tmp_path / "other", seed=4), noise=0.5, epochs=1)
    assert not np.array_equal(fresh.get_weights()[0], whole[0])
