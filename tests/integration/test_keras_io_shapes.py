"""Issue 36: Keras scripts as keras-io writes them train exactly, one process, in-process.

The shapes are tests/scripts/keras_io_shapes.py's (see its docstring). Each test here
failed before issue 36: a GAN's optimizers restarted from zero state after a resume, a
model building its layers in its first step could not train, a fit without validation
data was refused, and a stop on an epoch's last batch lost that epoch's end.

This module's other half, on two processes: tests/e2e/test_keras_io_shapes.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_sdk as det
from det_sdk.keras import _compat
from tests.support import SCRIPTS, assert_arrays_equal

sys.path.insert(0, str(SCRIPTS))
import keras_io_shapes as shapes

keras = _compat.keras


def test_a_gan_resumes_both_optimizers_it_builds_in_its_first_step(tmp_path: Path) -> None:
    tf.config.experimental.enable_op_determinism()
    whole, hist = shapes.fit_gan(det.keras.init(runs_dir=tmp_path / "whole", seed=3))
    assert len(hist.history["d_loss"]) == 3  # no validation data: trained all the same

    runs = tmp_path / "stopped"
    with pytest.raises(SystemExit) as stop:
        shapes.fit_gan(det.keras.init(runs_dir=runs, seed=3),
                       callbacks=[shapes.StopOnBatch(1, 1)])
    assert stop.value.code == 0
    ctx = det.keras.init(runs_dir=runs, resume=1)
    resumed, hist2 = shapes.fit_gan(ctx)
    # weights AND both optimizers' slots (Adam's moments, SGD's momentum) as uninterrupted
    assert_arrays_equal(shapes.gan_state(whole), shapes.gan_state(resumed))
    assert hist2.history["d_loss"] == hist.history["d_loss"]
    assert int(resumed.d_optimizer.iterations.numpy()) == 3 * 4


def test_a_model_that_builds_its_layers_in_train_step_trains_as_model_fit(
        tmp_path: Path) -> None:
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(5)
    plain, plain_hist = shapes.fit_nocall(None)
    ctx = det.keras.init(runs_dir=tmp_path / "a", seed=5)  # seeds Python/NumPy/TF with 5 too
    ours, hist = shapes.fit_nocall(ctx)
    assert_arrays_equal(plain.get_weights(), ours.get_weights())
    assert hist.history["loss"] == plain_hist.history["loss"]

    # stopped mid-epoch, resumed from its checkpoint: the same weights again
    with pytest.raises(SystemExit):
        shapes.fit_nocall(det.keras.init(runs_dir=tmp_path / "b", seed=5),
                          callbacks=[shapes.StopOnBatch(0, 2)])
    resumed, _ = shapes.fit_nocall(det.keras.init(runs_dir=tmp_path / "b", resume=1))
    assert_arrays_equal(plain.get_weights(), resumed.get_weights())


def test_a_fit_without_validation_data_trains_a_layer_that_adds_its_own_loss(
        tmp_path: Path) -> None:
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(2)
    plain = shapes.add_loss_model()
    plain.compile(optimizer=keras.optimizers.SGD(0.1))
    ctx = det.keras.init(runs_dir=tmp_path, seed=2)
    ours = shapes.add_loss_model()
    ours.set_weights(plain.get_weights())
    ours.compile(optimizer=ctx.wrap_optimizer(keras.optimizers.SGD(0.1)))
    data = shapes.add_loss_data()
    plain_hist = plain.fit(data, batch_size=16, epochs=2, shuffle=False, verbose=0)
    hist = ctx.fit(ours, ctx.wrap_data(data), batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert_arrays_equal(plain.get_weights(), ours.get_weights())
    np.testing.assert_allclose(hist.history["loss"], plain_hist.history["loss"], rtol=1e-6)
    groups = {row["group"] for row in ctx.core._session.read_metrics()}
    assert groups == {"training"}  # recorded, with no validation row
    assert ctx.core._session.read_checkpoints()[-1]["epoch"] == 2


def _classifier_fit(ctx: det.keras.KerasContext, workdir: Path, callbacks: list) -> tuple:
    x, y = shapes.make_data(96)
    model = shapes.classifier()
    model.compile(ctx.wrap_optimizer(keras.optimizers.SGD(0.5)), "binary_crossentropy")
    best = workdir / "best_model.keras"
    keras_callbacks = [
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=2),
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1,
                                          min_delta=1.0),  # every epoch is a "plateau"
        keras.callbacks.ModelCheckpoint(str(best), monitor="val_loss", save_best_only=True),
    ]
    xs, ys = ctx.wrap_data(x[:64], y[:64])
    seen: list[int] = []
    record = keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(e))
    hist = ctx.fit(model, xs, ys, batch_size=16, epochs=4, validation_data=(x[64:], y[64:]),
                   verbose=0, callbacks=[*keras_callbacks, record, *callbacks])
    return model, hist, seen, best


def test_a_stop_on_an_epochs_last_batch_resumes_with_that_epochs_end(tmp_path: Path) -> None:
    tf.config.experimental.enable_op_determinism()
    whole, hist, _, _ = _classifier_fit(det.keras.init(runs_dir=tmp_path / "w", seed=9),
                                        tmp_path, [])
    runs = tmp_path / "s"
    with pytest.raises(SystemExit):  # epoch 1 has 4 batches: stopped on its last
        ctx = det.keras.init(runs_dir=runs, seed=9)
        _classifier_fit(ctx, tmp_path / "s", [shapes.StopOnBatch(1, 3)])
    ctx = det.keras.init(runs_dir=runs, resume=1)
    checkpoint = ctx.core._session.read_checkpoints()[-1]
    assert (checkpoint["epoch"], checkpoint["batch"]) == (2, 0)  # after the epoch's end
    resumed, hist2, seen_after, _ = _classifier_fit(ctx, tmp_path / "s", [])
    assert seen_after == [2, 3]  # epoch 1's end ran before the stop, not skipped
    assert hist2.history == hist.history  # val_loss, lr of ReduceLROnPlateau, every epoch
    assert_arrays_equal(whole.get_weights(), resumed.get_weights())
    epochs = [r["epoch"] for r in ctx.core._session.read_metrics() if r["group"] == "validation"]
    assert epochs == [1, 2, 3, 4]  # one validation record per epoch, none lost


def test_the_rank_is_folded_into_layers_random_state_and_data_seeds_are_shared() -> None:
    layer = keras.layers.Dropout(0.5)
    keras_rng = _compat.rng_variables(keras.Sequential([keras.Input((2,)), layer]))
    assert keras_rng
    before = [v.numpy().copy() for v in keras_rng]
    _compat.distinct_random_state(keras_rng, rank=0)
    assert_arrays_equal(before, [v.numpy() for v in keras_rng])  # rank 0 keeps its state
    _compat.distinct_random_state(keras_rng, rank=1)
    assert any((b != v.numpy()).any() for b, v in zip(before, keras_rng))

    _compat.set_seeds(4)  # every rank: the same NumPy stream (a keras-io shuffle agrees)
    first = np.random.permutation(10)
    _compat.set_seeds(4)
    np.testing.assert_array_equal(first, np.random.permutation(10))


def test_relative_callback_files_kept_with_the_trial_stay_reachable_by_their_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from det_sdk.keras._callback_state import keep_files_with_trial

    work, kept = tmp_path / "work", tmp_path / "trial_files"
    work.mkdir()
    (work / "taken").mkdir()  # a folder of the uploaded model directory: left as it is
    monkeypatch.chdir(work)
    callbacks = [keras.callbacks.ModelCheckpoint("best_model.keras"),
                 keras.callbacks.CSVLogger("logs/train.csv"),
                 keras.callbacks.CSVLogger("taken/other.csv")]
    moved = keep_files_with_trial(callbacks, kept, announce=False)
    assert callbacks[0].filepath == str(kept / "best_model.keras") and len(moved) == 3
    Path(callbacks[0].filepath).write_text("model")
    Path(callbacks[1].filename).write_text("epoch,loss\n")
    # the script's own relative paths read the kept files (load_model("best_model.keras"))
    assert Path("best_model.keras").read_text() == "model"
    assert Path("logs/train.csv").read_text() == "epoch,loss\n"
    assert not Path("taken").is_symlink()
    keep_files_with_trial(callbacks[:1], kept, announce=False)  # a relaunch: links exist
