"""context.fit with Keras's own options: validation_split, user callbacks, repeated fits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402


def _setup(tmp_path: Path):
    ctx = det.keras.init(runs_dir=tmp_path, seed=7)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 4)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, "sigmoid")])
    model.compile(ctx.wrap_optimizer(tf.keras.optimizers.SGD(0.1)), "binary_crossentropy")
    return ctx, model, x, y


def test_validation_split_holds_out_the_last_rows(tmp_path: Path) -> None:
    ctx, model, x, y = _setup(tmp_path)
    xs, ys = ctx.wrap_data(x, y)
    hist = ctx.fit(model, x=xs, y=ys, batch_size=10, epochs=2, validation_split=0.2, verbose=0)
    assert hist.params["steps"] == 8  # 80 training rows in batches of 10
    expected_val = model.evaluate(x[80:], y[80:], verbose=0)
    assert hist.history["val_loss"][-1] == pytest.approx(expected_val, rel=1e-6)


def test_user_callbacks_run_and_early_stopping_ends_the_fit(tmp_path: Path) -> None:
    ctx, model, x, y = _setup(tmp_path)
    seen = []
    hist = ctx.fit(
        model, x=x, y=y, batch_size=10, epochs=50, validation_data=(x, y), verbose=0,
        callbacks=[
            tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(e)),
            tf.keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0),
        ],
    )
    assert seen == hist.epoch == [0, 1]  # stopped after patience ran out
    last = ctx.core._session.read_checkpoints()[-1]
    assert last["epoch"] == 2  # the final state is checkpointed


def test_a_second_fit_in_the_same_process_starts_afresh(tmp_path: Path) -> None:
    ctx, model, x, y = _setup(tmp_path)
    ctx.fit(model, x=x, y=y, batch_size=10, epochs=2, validation_data=(x, y), verbose=0)
    _, model2, _, _ = _setup(tmp_path / "other")
    hist = ctx.fit(model2, x=x, y=y, batch_size=10, epochs=2, validation_data=(x, y), verbose=0)
    assert hist.epoch == [0, 1]  # not "already trained" by the first fit's checkpoint


def test_two_models_with_wrapped_optimizers_each_fit(tmp_path: Path) -> None:
    """Each checkpoint holds its own model's optimizers, not every one the context wrapped."""
    ctx = det.keras.init(runs_dir=tmp_path, seed=1)

    def make():
        m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
        m.compile(optimizer=ctx.wrap_optimizer(tf.keras.optimizers.Adam(0.1)), loss="mse")
        return m

    a, b = make(), make()  # both wrapped before either trains
    x = np.random.default_rng(0).random((64, 4)).astype("float32")
    ctx.fit(a, x=x, y=x[:, :2], epochs=1, validation_data=(x, x[:, :2]), verbose=0)
    ctx.fit(b, x=x, y=x[:, :2], epochs=1, validation_data=(x, x[:, :2]), verbose=0)
    path = ctx.core.checkpoint.checkpoint_path(ctx.core.checkpoint.latest_checkpoint)
    index = json.loads((path / "state.json").read_text())["arrays"]
    groups = {e["group"] for e in index}
    assert "optimizer:0" in groups and "optimizer:1" not in groups


def _dropout_model(ctx):
    model = tf.keras.Sequential([
        tf.keras.Input((4,)), tf.keras.layers.Dense(8, "relu"), tf.keras.layers.Dropout(0.3),
        tf.keras.layers.Dense(1, "sigmoid"),
    ])
    model.compile(ctx.wrap_optimizer(tf.keras.optimizers.Adam(0.01)), "binary_crossentropy")
    return model


def _rows(run_dir: Path, group: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["group"] == group]


def test_min_validation_period_in_batches_validates_mid_epoch_without_changing_training(
    tmp_path: Path,
) -> None:
    """Validation every 4 batches (10 per epoch) splits the epochs; training is the same."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 4)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    weights = []
    for name, config in (("plain", {}), ("periodic", {"min_validation_period": {"batches": 4},
                                                       "scheduling_unit": 3})):
        tf.keras.utils.set_random_seed(0)
        ctx = det.keras.init(runs_dir=tmp_path / name, seed=7, config=config)
        model = _dropout_model(ctx)
        hist = ctx.fit(model, x=x, y=y, batch_size=10, epochs=2, validation_data=(x, y),
                       verbose=0)
        weights.append(model.get_weights())
        run_dir = tmp_path / name / "1"
        val_steps = [r["steps_completed"] for r in _rows(run_dir, "validation")]
        train_steps = [r["steps_completed"] for r in _rows(run_dir, "training")]
        if name == "plain":
            assert val_steps == [10, 20]  # Keras's default: each epoch end
            assert hist.epoch == [0, 1]
        else:
            assert val_steps == [4, 8, 12, 16, 20]  # the period, and the end
            # running averages every scheduling_unit batches, and at each call's end
            assert set(train_steps) == {3, 4, 6, 8, 9, 10, 12, 15, 16, 18, 20}
            last = ctx.core._session.read_checkpoints()[-1]
            assert (last["epoch"], last["steps_completed"]) == (2, 20)
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)


def test_validation_freq_is_honoured_with_the_last_epoch_always_validated(
    tmp_path: Path,
) -> None:
    ctx, model, x, y = _setup(tmp_path)
    hist = ctx.fit(model, x=x, y=y, batch_size=10, epochs=5, validation_data=(x, y),
                   validation_freq=2, verbose=0)
    val_steps = [r["steps_completed"] for r in _rows(tmp_path / "1", "validation")]
    assert val_steps == [20, 40, 50]
    assert len(hist.history["val_loss"]) == 3


def _batches(x, y, batch: int = 20):
    while True:
        for i in range(0, len(x), batch):
            yield x[i:i + batch], y[i:i + batch]


def _fit_with_class_weight(fit, model, x, y):
    try:
        fit(model, _batches(x, y), steps_per_epoch=5, epochs=2, verbose=0,
            class_weight={0: 1.0, 1: 5.0})
    except ValueError as err:
        return ("refused", type(err), "class_weight" in str(err))
    return ("trained", [w.tolist() for w in model.get_weights()])


def test_class_weight_with_a_generator_does_what_model_fit_does(tmp_path: Path) -> None:
    """Never dropped: Keras 2 weights a generator's batches by class, Keras 3 refuses the
    argument; context.fit gives the same outcome (the same weights, or the same error)."""
    ctx, model, x, y = _setup(tmp_path)
    start = model.get_weights()
    ours = _fit_with_class_weight(lambda m, *a, **k: ctx.fit(m, *a, **k), model, x, y)
    ctx.close()
    plain = tf.keras.models.clone_model(model)
    plain.set_weights(start)
    plain.compile(tf.keras.optimizers.SGD(0.1), "binary_crossentropy")
    theirs = _fit_with_class_weight(lambda m, *a, **k: m.fit(*a, **k), plain, x, y)
    assert ours == theirs
    if ours[0] == "trained":  # and the weight changed training (it was applied)
        unweighted = tf.keras.models.clone_model(model)
        unweighted.set_weights(start)
        unweighted.compile(tf.keras.optimizers.SGD(0.1), "binary_crossentropy")
        unweighted.fit(_batches(x, y), steps_per_epoch=5, epochs=2, verbose=0)
        assert [w.tolist() for w in unweighted.get_weights()] != ours[1]
