"""A checkpoint's snapshot and its background writer, in this process.

The snapshot is taken in one TensorFlow op and shares the variables' buffers; these
tests train on after taking it and check that what is written is the state of the
instant it was taken (copy on write), that the writer surfaces a failed write as an
error in the training thread, and that it keeps one thread for all writes.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from det_sdk.engine.writer import CheckpointWriteError, CheckpointWriter  # noqa: E402
from det_sdk.keras import _checkpoint, _compat  # noqa: E402


def _trained_model() -> tuple[object, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype("float32")
    y = rng.integers(0, 3, size=64)
    model = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(8),
                                 tf.keras.layers.Dropout(0.5), tf.keras.layers.Dense(3)])
    model.compile(tf.keras.optimizers.Adam(0.05), "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    return model, x, y


def _state(model: object) -> list[np.ndarray]:
    opt = model.optimizer
    return [np.array(v.numpy()) for v in
            _compat.model_variables(model) + _checkpoint.optimizer_variables(opt, model)]


def test_a_snapshot_is_the_state_when_taken_not_when_written(tmp_path: Path) -> None:
    model, x, y = _trained_model()
    layout = _checkpoint.StateLayout(model, [model.optimizer], model.optimizer)
    before = _state(model)
    snap = layout.snapshot()
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)  # updates every variable in place
    after = _state(model)
    assert any(not np.array_equal(a, b) for a, b in zip(before, after))

    _checkpoint.write_snapshot(tmp_path, snap, {"epoch": 1})
    saved = _checkpoint._read_arrays(tmp_path)
    written = saved["model"] + saved["optimizer:0"]
    assert len(written) == len(before)
    for a, b in zip(before, written):
        np.testing.assert_array_equal(a, b)
    assert snap.nbytes == sum(a.nbytes for a in before) + sum(
        np.asarray(a).nbytes for a in saved.get("rng:0", []))


def test_snapshot_size_counts_numpy_and_tensor_arrays() -> None:
    model, _, _ = _trained_model()
    layout = _checkpoint.StateLayout(model, [model.optimizer], model.optimizer)
    _, own_rng = layout.read()
    as_numpy = [t.numpy() for t in own_rng]  # how other processes' RNG states arrive
    snap = layout.snapshot(rng_states=[as_numpy, as_numpy])
    rng_bytes = sum(a.nbytes for a in as_numpy)
    assert snap.nbytes == layout.snapshot().nbytes + rng_bytes


def test_the_writer_reports_a_failed_write_at_the_next_wait_and_goes_on() -> None:
    writer = CheckpointWriter()
    threads: list[int] = []
    writer.submit(lambda: threads.append(threading.get_ident()))
    writer.wait()

    def fail() -> None:
        threads.append(threading.get_ident())
        raise OSError(28, "No space left on device")

    writer.submit(fail)
    with pytest.raises(CheckpointWriteError, match="No space left on device"):
        writer.wait()
    writer.wait()  # reported once
    done = threading.Event()
    writer.submit(lambda: (threads.append(threading.get_ident()), done.set()))
    writer.wait()
    assert done.is_set() and not writer.busy
    assert len(set(threads)) == 1 and threads[0] != threading.get_ident()


def test_a_new_write_waits_for_the_one_in_flight() -> None:
    writer = CheckpointWriter()
    release = threading.Event()
    order: list[str] = []
    writer.submit(lambda: (release.wait(5), order.append("first")))
    assert writer.busy
    threading.Timer(0.2, release.set).start()
    writer.submit(lambda: order.append("second"))  # blocks until the first is done
    assert order == ["first"]
    writer.wait()
    assert order == ["first", "second"]


def test_a_period_in_batches_checkpoints_every_so_many_batches(tmp_path: Path) -> None:
    import json

    import det_sdk as det

    ctx = det.keras.init(runs_dir=tmp_path, seed=2, checkpoint_period={"batches": 3})
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 6)).astype("float32")
    y = rng.integers(0, 3, size=128)
    model = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(3)])
    model.compile(ctx.wrap_optimizer(tf.keras.optimizers.Adam(0.01)),
                  "sparse_categorical_crossentropy")
    xs, ys = ctx.wrap_data(x, y)
    ctx.fit(model, x=xs, y=ys, batch_size=16, epochs=1, validation_data=(x, y), verbose=0)
    ctx.close()
    rows = [json.loads(line) for f in tmp_path.glob("*/checkpoints.jsonl")
            for line in f.read_text().splitlines()]
    assert [r["steps_completed"] for r in rows] == [3, 6, 8]  # every 3 batches, and the end


def _twin_models(make_optimizer: object) -> list[object]:
    models = []
    for _ in range(2):
        tf.keras.utils.set_random_seed(3)
        model = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(16, "relu"),
                                     tf.keras.layers.Dense(3)])
        model.compile(make_optimizer(), "sparse_categorical_crossentropy")
        models.append(model)
    return models


@pytest.mark.parametrize("make_optimizer", [
    lambda: tf.keras.optimizers.Adam(0.05),
    lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    lambda: tf.keras.optimizers.RMSprop(0.01, momentum=0.5),
    lambda: tf.keras.optimizers.Nadam(0.01),
    lambda: tf.keras.optimizers.AdamW(0.01, amsgrad=True),
    lambda: tf.keras.optimizers.Adagrad(0.1),
    lambda: tf.keras.optimizers.Adamax(0.01),
    lambda: tf.keras.optimizers.Ftrl(0.1),
], ids=["adam", "sgd-nesterov", "rmsprop", "nadam", "adamw-amsgrad", "adagrad", "adamax",
        "ftrl"])
def test_updates_into_fresh_buffers_train_bit_equal_to_updates_in_place(
        make_optimizer: object) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(96, 6)).astype("float32")
    y = rng.integers(0, 3, size=96)
    in_place, fresh = _twin_models(make_optimizer)
    fresh.fit(x[:16], y[:16], epochs=1, verbose=0)  # traced with updates in place
    in_place.fit(x[:16], y[:16], epochs=1, verbose=0)
    # what a fit's first checkpoint set-up does: the step function is made anew
    layout = _checkpoint.StateLayout(fresh, [fresh.optimizer], fresh.optimizer)
    assert layout.changed_updates
    # both traced anew (Keras 2's Nadam counts its traces in Python: only a fair
    # comparison if both traced as often)
    fresh.train_function = in_place.train_function = None
    in_place.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0)
    # every step of this one writes new buffers, as the step after a snapshot does
    fresh.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0,
              callbacks=[_ArmEveryStep(fresh.optimizer)])
    a, b = _state(in_place), _state(fresh)
    assert any(not np.array_equal(w, w0) for w, w0 in zip(a, _state(_twin_models(
        make_optimizer)[0]))), "training changed nothing: the comparison would be empty"
    for w_in_place, w_fresh in zip(a, b):
        np.testing.assert_array_equal(w_in_place, w_fresh)


class _ArmEveryStep(tf.keras.callbacks.Callback):
    def __init__(self, optimizer: object) -> None:
        super().__init__()
        self.optimizer = optimizer

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        _compat.arm_fresh_buffers(self.optimizer)


def _address(variable: object) -> int:
    return _checkpoint._host_array(variable.value()).ctypes.data


def test_an_update_into_a_fresh_buffer_leaves_the_old_one_to_the_snapshot() -> None:
    model, x, y = _trained_model()
    layout = _checkpoint.StateLayout(model, [model.optimizer], model.optimizer)
    model.train_function = None  # traced before: made anew, as a fit does
    kernel = layout.variables[0]
    model.train_on_batch(x[:16], y[:16])
    before = _address(kernel)
    model.train_on_batch(x[:16], y[:16])  # no snapshot: updated in place, no new buffer
    assert _address(kernel) == before

    snap = layout.snapshot()
    held = _checkpoint._host_array(snap.arrays[0][2])
    values = held.copy()
    model.train_on_batch(x[:16], y[:16])  # the step after a snapshot: a new buffer
    np.testing.assert_array_equal(held, values)  # the snapshot's buffer is untouched
    assert not np.array_equal(kernel.numpy(), values)
    after = _address(kernel)
    assert after not in (before, held.ctypes.data)
    model.train_on_batch(x[:16], y[:16])  # and the steps after it, in place again
    assert _address(kernel) == after
    np.testing.assert_array_equal(held, values)


def test_the_compile_config_is_kept_until_the_model_is_compiled_again() -> None:
    """model.json's compile config is serialized once per compile (3 ms of the writer's
    CPU per checkpoint otherwise), and a recompile with the same optimizer is seen."""
    keras = _compat.keras
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.1)
    model.compile(optimizer=opt, loss="mse")
    layout = _checkpoint.StateLayout(model, [opt])
    first = layout.model_spec()["compile_config"]
    assert layout.model_spec()["compile_config"] is first  # kept, not serialized again
    assert first["loss"] == "mse"
    model.compile(optimizer=opt, loss="mae")
    assert layout.fits(model, [opt])
    assert layout.model_spec()["compile_config"]["loss"] == "mae"
