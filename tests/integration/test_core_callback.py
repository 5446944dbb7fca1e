"""det_sdk.core, the DeterminedCallback for a plain model.fit, and the TensorFlow launcher.

Fast tests train tiny models in this process against a local run directory (the
core contexts' stand-in off the cluster); slow ones run examples/core_callback on
a real master (1 and 2 slots, pause and activate) and locally.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_core_callback.py.
"""

from __future__ import annotations

import doctest
import importlib
import json
import threading
from pathlib import Path

import numpy as np
import pytest

import det_sdk as det
from det_sdk.core import TFWorkers
from harness.master import free_port


def test_core_init_locally_keeps_a_run_and_its_records(tmp_path: Path) -> None:
    config = {"hyperparameters": {"lr": 0.1, "units": {"type": "int", "minval": 1, "maxval": 9}},
              "searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": 3}}}
    with det.core.init(runs_dir=tmp_path, config=config, hparams={"units": 4}) as ctx:
        info = ctx.info
        assert (info.task_type, info.trial.trial_id, info.latest_checkpoint) == ("TRIAL", 1, None)
        assert dict(info.trial.hparams) == {"lr": 0.1, "units": 4}
        assert (ctx.distributed.rank, ctx.distributed.size) == (0, 1)
        assert isinstance(ctx.distributed, det.core.DistributedContext)
        assert ctx.preempt.should_preempt() is False
        ops = []
        for op in ctx.searcher.operations():  # off the cluster: one, the config's length
            ops.append((op.length, op.unit))
            op.report_progress(3)
            op.report_completed(0.5)
        assert ops == [(3, "epochs")]
        ctx.train.report_training_metrics(steps_completed=5, metrics={"loss": 1.5}, epoch=1)
        ctx.train.report_validation_metrics(steps_completed=5, metrics={"val_loss": 2.0})
        with ctx.checkpoint.store_path({"steps_completed": 5, "note": "x"}) as (path, uuid):
            (path / "w.txt").write_text("weights")
        with ctx.checkpoint.restore_path(uuid) as path:
            assert (path / "w.txt").read_text() == "weights"
        assert ctx.checkpoint.get_metadata(uuid) == {"steps_completed": 5, "note": "x"}
        ctx.checkpoint.download(uuid, tmp_path / "copy")
        again = ctx.checkpoint.upload(tmp_path / "copy", {"steps_completed": 6})
        with pytest.raises(ValueError, match="steps_completed"), \
                ctx.checkpoint.store_path({"epoch": 1}):
            pass
        with pytest.raises(ValueError, match="group"):
            ctx.train.report_metrics("train", 1, {"loss": 1.0})
    run = tmp_path / "1"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["group"], r["steps_completed"], r["epoch"]) for r in rows] == [
        ("training", 5, 1), ("validation", 5, 1)]
    ckpts = [json.loads(line) for line in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert [c["uuid"] for c in ckpts] == [uuid, again] and ckpts[0]["size"] > 0
    # resuming the run: its latest checkpoint and its id, as the cluster gives them
    with det.core.init(runs_dir=tmp_path, resume=1) as ctx:
        assert (ctx.info.trial.trial_id, ctx.info.latest_checkpoint) == (1, again)


def test_tf_workers_collectives_across_three_workers() -> None:
    port = free_port()
    workers = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    env = {"DET_TF_COLLECTIVE_ADDR": f"127.0.0.1:{port}", "DET_TF_COLLECTIVE_TOKEN": "t"}
    results: dict[int, tuple] = {}

    def worker(i: int) -> None:
        d = TFWorkers(workers, i, env)
        results[i] = (d.allgather(i * 10), d.broadcast(f"from {d.rank}"), d.any(i == 2),
                      d.local_rank, d.local_size)
        d.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in (2, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {i: ([0, 10, 20], "from 0", True, i, 3) for i in range(3)}


@pytest.mark.parametrize("name", [
    "det_sdk.core._distributed", "det_sdk.core._train", "det_sdk.core._preempt",
    "det_sdk.core._searcher", "det_sdk.core._context", "det_sdk.launch.tensorflow",
    "det_sdk.keras._determined_callback"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def _model(keras):
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    return model


def _data() -> tuple:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    return x, y


def _fit(ctx, model, checkpoint, continue_id, epochs, seen=None):
    from det_sdk.keras._compat import keras

    x, y = _data()
    cb = det.keras.DeterminedCallback(ctx, checkpoint=checkpoint, continue_id=continue_id)
    probe = keras.callbacks.LambdaCallback(on_train_begin=lambda logs: seen.append(
        (int(model.optimizer.iterations.numpy()), [w.copy() for w in model.get_weights()]))
    ) if seen is not None else None
    hist = model.fit(x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0,
                     validation_data=(x[:16], y[:16]),
                     callbacks=[cb] + ([probe] if probe else []))
    return cb, hist


def test_callback_continues_its_own_checkpoint_and_warm_starts_from_others(
        tmp_path: Path) -> None:
    from det_sdk.keras import _checkpoint
    from det_sdk.keras._compat import keras

    # uninterrupted: 3 epochs in one fit
    with det.core.init(runs_dir=tmp_path / "a", seed=1) as ctx:
        full = _model(keras)
        _fit(ctx, full, None, continue_id=1, epochs=3)
        rows = ctx._session.read_metrics()
        ckpts = ctx._session.read_checkpoints()
    assert [(r["group"], r["epoch"]) for r in rows] == [
        (g, e) for e in (1, 2, 3) for g in ("training", "validation")]
    assert "val_loss" in rows[1]["metrics"] and [c["epoch"] for c in ckpts] == [3]  # latest kept

    # stopped after 1 epoch, then a new process continues with the same continue_id
    runs = tmp_path / "b"
    keep = {"checkpoint_storage": {"save_trial_latest": 100}}
    with det.core.init(runs_dir=runs, seed=1, config=keep) as ctx:
        _fit(ctx, _model(keras), None, continue_id=7, epochs=1)
        first = ctx._session.latest_checkpoint
    with det.core.init(runs_dir=runs, resume=1) as ctx:
        assert ctx.info.latest_checkpoint == first
        model, seen = _model(keras), []
        cb, hist = _fit(ctx, model, ctx.info.latest_checkpoint, 7, epochs=3, seen=seen)
        assert hist.epoch == [1, 2]  # started at epoch 2 of 3
        assert seen[0][0] == 4  # the optimizer's state came back (4 steps done)
        assert cb.position.steps_completed == 12
    for a, b in zip(full.get_weights(), model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # = the uninterrupted run

    # resumed exactly at the searcher's length (stopped before the searcher heard):
    # nothing to train; the saved validation completes the operation
    told = []
    with det.core.init(runs_dir=runs, resume=1, config={"searcher": {
            "name": "single", "metric": "val_loss", "max_length": {"epochs": 3}}}) as ctx:
        ctx._session.complete_operation = lambda length, metric: told.append((length, metric))
        _, hist = _fit(ctx, _model(keras), ctx.info.latest_checkpoint, 7, epochs=3)
        last = ctx._session.read_checkpoints()[-1]
    assert hist.epoch == [] and [(t.epochs, m) for t, m in told] == [
        (3, last["metrics"]["val_loss"])]

    # another continue_id: a warm start, weights only, from epoch 0
    meta = _checkpoint.read_metadata(det.session.find_runs_dir_checkpoint(runs, first))
    assert meta["continue_id"] == 7 and meta["epoch"] == 1
    with det.core.init(runs_dir=tmp_path / "c") as ctx:
        ctx._session.checkpoint_path = lambda uuid: det.session.find_runs_dir_checkpoint(
            runs, uuid)  # another run's checkpoint, as another trial's on the cluster
        model, seen = _model(keras), []
        _, hist = _fit(ctx, model, first, continue_id=8, epochs=1, seen=seen)
    assert hist.epoch == [0] and seen[0][0] == 0  # epoch 0, fresh optimizer
    weights = _checkpoint._read_arrays(det.session.find_runs_dir_checkpoint(runs, first))
    for a, b in zip(weights["model"], seen[0][1]):
        np.testing.assert_array_equal(a, b)  # but the checkpoint's weights


def test_callback_arguments_are_checked(tmp_path: Path) -> None:
    with det.core.init(runs_dir=tmp_path) as ctx:
        with pytest.raises(ValueError, match="train_metrics_report_period"):
            det.keras.DeterminedCallback(ctx, None, 1, train_metrics_report_period="batch")
        with pytest.raises(ValueError, match="checkpoint_epochs"):
            det.keras.DeterminedCallback(ctx, None, 1, checkpoint_epochs=-1)
        with pytest.raises(TypeError, match="continue_id"):
            det.keras.DeterminedCallback(ctx, None, None)
        with pytest.raises(TypeError, match="core_context"):
            det.keras.DeterminedCallback(object(), None, 1)
        tb = det.keras.TensorBoard(ctx, log_dir="/elsewhere")
        assert Path(tb.log_dir) == ctx._session.tensorboard_dir


def test_on_keras_3_workers_the_launcher_spawns_are_refused_saying_what_works() -> None:
    """Keras 3 cannot train MultiWorkerMirroredStrategy across processes: the workers of
    ``--processes N`` (TF_CONFIG, no horovodrun) are refused before anything is created,
    naming the issue and what works instead (the launcher passing the failure on is
    tests/e2e/test_core_callback.py's first test)."""
    pytest.importorskip("tensorflow")
    from det_sdk.keras import _compat

    if _compat.MULTI_WORKER_FIT:
        pytest.skip("Keras 2 trains such workers under MultiWorkerMirroredStrategy")
    two = {"TF_CONFIG": json.dumps({"cluster": {"worker": [f"127.0.0.1:{free_port()}"] * 2},
                                    "task": {"type": "worker", "index": 1}})}
    with pytest.raises(det.core.UnsupportedStrategyError) as err:
        det.core.DistributedContext.from_tf_config(environ=two)
    assert "keras-team/keras#20585" in str(err.value)
    assert "horovodrun -np N --gloo" in str(err.value)
