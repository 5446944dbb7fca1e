"""A tiny training script for the tests: a dense net with dropout on generated data.

Behaviour is set through the environment so that one file serves every test:
  TINY_EPOCHS       epochs to train (default 4)
  TINY_INPUT        numpy | sequence | dataset (default numpy); with dataset the validation
                    set is a tf.data dataset reshuffled at every pass, 3 of its 5 batches
                    validated (keras-io's habit: each epoch validates other rows)
  TINY_STOP_AT      "E" or "E:B": send SIGTERM to this process after batch B of epoch E
                    (0-based epoch; without B, at the end of epoch E)
  TINY_STOP_RANK    only this rank sends itself the signal (default: every rank)
  TINY_DROPOUT      dropout rate (default 0.3)
  TINY_WEIGHTS_OUT  where rank 0 saves the final weights (.npz)
  TINY_HISTORY_OUT  where rank 0 saves the History (JSON): the whole run's, also after a resume
Plus det_sdk's own: DET_RUNS_DIR, DET_RESUME.
"""

import json
import os
import signal

import numpy as np
import tensorflow as tf

import det_sdk as det

tf.config.experimental.enable_op_determinism()
context = det.keras.init(
    hparams={"learning_rate": 0.05, "global_batch_size": 16,
             "dropout": float(os.environ.get("TINY_DROPOUT", "0.3"))},
    seed=1234,
)
hp = context.training.hparams

rng = np.random.default_rng(0)
x = rng.normal(size=(200, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) > 0).astype("float32")
x_val, y_val = x[:40], y[:40]
batch_size = context.distributed.shard_batch_size(hp["global_batch_size"])


class Batches(tf.keras.utils.Sequence):
    def __init__(self, x, y, bs):
        self.x, self.y, self.bs = x, y, bs

    def __len__(self):
        return (len(self.x) + self.bs - 1) // self.bs

    def __getitem__(self, i):
        return self.x[i * self.bs:(i + 1) * self.bs], self.y[i * self.bs:(i + 1) * self.bs]


kind = os.environ.get("TINY_INPUT", "numpy")
if kind == "numpy":
    train = dict(zip(("x", "y"), context.wrap_data(x, y)), batch_size=batch_size)
elif kind == "sequence":
    train = {"x": context.wrap_data(Batches(x, y, batch_size))}
else:
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
    train = {"x": context.wrap_data(ds)}
validation = {"validation_data": (x_val, y_val)}
if kind == "dataset":
    validation = {"validation_data": tf.data.Dataset.from_tensor_slices((x_val, y_val))
                  .shuffle(40).batch(8), "validation_steps": 3}

model = tf.keras.Sequential([
    tf.keras.Input((8,)),
    tf.keras.layers.Dense(16, activation="relu"),
    tf.keras.layers.Dropout(hp["dropout"]),
    tf.keras.layers.Dense(1, activation="sigmoid"),
])
opt = context.wrap_optimizer(tf.keras.optimizers.Adam(hp["learning_rate"]))
model.compile(optimizer=opt, loss="binary_crossentropy", metrics=["accuracy"])


class StopAt(tf.keras.callbacks.Callback):
    """Deliver a real SIGTERM to this process at a chosen point."""

    def __init__(self, spec):
        super().__init__()
        epoch, _, batch = spec.partition(":")
        self.epoch, self.batch = int(epoch), int(batch) if batch else None

    def on_train_batch_end(self, batch, logs=None):
        if self.batch is not None and self._epoch == self.epoch and batch + 1 == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if self.batch is None and epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


class Ran(tf.keras.callbacks.Callback):
    """The epochs this process trained (History also holds those before a resume)."""

    epochs: list = []

    def on_epoch_begin(self, epoch, logs=None):
        if epoch not in self.epochs:
            self.epochs.append(epoch)


stop_rank = os.environ.get("TINY_STOP_RANK")
callbacks = [Ran()] + (
    [StopAt(os.environ["TINY_STOP_AT"])]
    if os.environ.get("TINY_STOP_AT")
    and (stop_rank is None or int(stop_rank) == context.distributed.rank)
    else []
)
hist = context.fit(
    model, **train, epochs=int(os.environ.get("TINY_EPOCHS", "4")),
    **validation, callbacks=callbacks, verbose=0,
)
if context.distributed.is_chief and os.environ.get("TINY_WEIGHTS_OUT"):
    np.savez(os.environ["TINY_WEIGHTS_OUT"], *model.get_weights())
if context.distributed.is_chief and os.environ.get("TINY_HISTORY_OUT"):
    with open(os.environ["TINY_HISTORY_OUT"], "w") as f:
        json.dump(hist.history, f)
print("epochs run:", Ran.epochs)
print("history epochs:", hist.epoch)
