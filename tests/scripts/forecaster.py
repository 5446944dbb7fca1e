"""A weather-style forecaster, written as a Keras user writes one, ported with the
README's lines only (issue 28): ``timeseries_dataset_from_array`` windows of a series,
``EarlyStopping`` and ``ModelCheckpoint``, then ``det.keras.init()`` / ``wrap_data`` /
``context.fit``.

Runs as ``python forecaster.py``, under ``horovodrun -np 2``, and on the cluster. The
environment steers the test: ``FORECAST_STOP_EPOCH=k`` sends this process SIGTERM after
epoch k (a real signal, as a preemption); ``FORECAST_OUT`` is where rank 0 writes the
final weights, the epochs trained and the weights of ModelCheckpoint's file;
``FORECAST_BEST`` moves ModelCheckpoint's file (relative ``best.keras`` by default, as
the user wrote it).
"""

import json
import os
import signal

import numpy as np
import tensorflow as tf

import det_sdk as det

WINDOW = 12


def series(n: int = 640) -> tuple[np.ndarray, np.ndarray]:
    """Three 'sensors' with a daily cycle and noise; the target is sensor 0, 3 steps on."""
    rng = np.random.default_rng(11)
    t = np.arange(n, dtype="float32")
    cycle = np.sin(2 * np.pi * t / 48.0)
    feats = np.stack([cycle + 0.3 * rng.normal(size=n), np.cos(2 * np.pi * t / 48.0),
                      0.5 * cycle + 0.2 * rng.normal(size=n)], axis=1).astype("float32")
    target = np.roll(feats[:, 0], -3)
    return feats, target


class StopAfterEpoch(tf.keras.callbacks.Callback):
    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    tf.keras.utils.set_random_seed(3)
    context = det.keras.init(seed=3)
    feats, target = series()
    split = 480
    train = tf.keras.utils.timeseries_dataset_from_array(
        feats[:split], target[WINDOW - 1:split + WINDOW - 1], sequence_length=WINDOW,
        batch_size=context.distributed.shard_batch_size(32))
    val = tf.keras.utils.timeseries_dataset_from_array(
        feats[split:-WINDOW], target[split + WINDOW - 1:-1], sequence_length=WINDOW,
        batch_size=context.distributed.shard_batch_size(32))
    train, val = context.wrap_data(train), context.wrap_data(val)

    inputs = tf.keras.Input((WINDOW, 3))
    hidden = tf.keras.layers.Flatten()(inputs)
    hidden = tf.keras.layers.Dense(16, activation="relu")(hidden)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(hidden))
    model.compile(optimizer=context.wrap_optimizer(tf.keras.optimizers.Adam(3e-3)),
                  loss="mse", metrics=["mae"])
    callbacks = [
        tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=2, min_delta=0.002,
                                         restore_best_weights=True),
        tf.keras.callbacks.ModelCheckpoint(os.environ.get("FORECAST_BEST", "best.keras"),
                                           monitor="val_loss", save_best_only=True),
    ]
    stop = int(os.environ.get("FORECAST_STOP_EPOCH", "-1"))
    if stop >= 0 and context.distributed.rank == 0:
        callbacks.append(StopAfterEpoch(stop))
    history = context.fit(model, train, validation_data=val, epochs=30, verbose=0,
                          callbacks=callbacks)
    out = os.environ.get("FORECAST_OUT")
    if out and context.distributed.rank == 0:
        with open(out, "w") as f:
            json.dump({"size": context.distributed.size, "epochs": list(history.epoch),
                       "val_loss": [float(v) for v in history.history["val_loss"]],
                       "weights": [w.tolist() for w in model.get_weights()],
                       # ModelCheckpoint's file, loaded here (a test process need not
                       # import TensorFlow to read it)
                       "best_weights": [w.tolist() for w in tf.keras.models.load_model(
                           os.environ.get("FORECAST_BEST", "best.keras")).get_weights()]}, f)


if __name__ == "__main__":
    main()
