"""Stateful callbacks across a resume, on any number of processes (tests/e2e/test_horovod.py).

EarlyStopping(patience=2) + ModelCheckpoint(save_best_only) + ReduceLROnPlateau + CSVLogger
+ a user's callback with get_state/set_state, in a small model's fit on data it overfits.
  CB_OUT           folder for the CSV, the best model and each rank's rank<N>.json/.npz
  CB_INTERRUPT_AT  raise at the end of this epoch (0-based), before its checkpoint
Plus det_sdk's own: DET_RUNS_DIR, DET_RESUME.
"""

import json
import math
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

import det_sdk as det

tf.config.experimental.enable_op_determinism()
out = Path(os.environ["CB_OUT"])
context = det.keras.init(seed=5)
rank = context.distributed.rank


class CountImprovements(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.best, self.improved = math.inf, []

    def on_epoch_end(self, epoch, logs=None):
        if logs["val_loss"] < self.best:
            self.best = logs["val_loss"]
            self.improved.append(epoch)

    def get_state(self):
        return {"best": self.best, "improved": self.improved}

    def set_state(self, state):
        self.best, self.improved = state["best"], list(state["improved"])


class Interrupt(tf.keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise RuntimeError(f"interrupted after epoch {epoch}")


rng = np.random.default_rng(3)
w = np.array([1.0, -2.0, 0.5, 1.0], "float32")
x = rng.normal(size=(64, 4)).astype("float32")
y = (x @ w)[:, None] + rng.normal(size=(64, 1)).astype("float32") * 2
xv = rng.normal(size=(32, 4)).astype("float32")
yv = (xv @ w)[:, None]

model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(32, "relu"),
                             tf.keras.layers.Dense(1)])
model.compile(context.wrap_optimizer(tf.keras.optimizers.SGD(0.02, momentum=0.9)), "mse")
user = CountImprovements()
early = tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=2)
callbacks = [
    tf.keras.callbacks.CSVLogger(str(out / "log.csv")),
    early,
    tf.keras.callbacks.ModelCheckpoint(str(out / "best.keras"), monitor="val_loss",
                                       save_best_only=True),
    tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", patience=1, factor=0.5),
    user,
]
if os.environ.get("CB_INTERRUPT_AT"):
    callbacks.append(Interrupt(int(os.environ["CB_INTERRUPT_AT"])))
hist = context.fit(model, x=x, y=y, batch_size=context.distributed.shard_batch_size(32),
                   epochs=40, validation_data=(xv, yv), verbose=0, callbacks=callbacks)
np.savez(out / f"rank{rank}.npz", *model.get_weights())
(out / f"rank{rank}.json").write_text(json.dumps({
    "epochs": list(hist.epoch), "improved": user.improved, "best": user.best,
    "early_best": float(early.best), "stopped_epoch": int(early.stopped_epoch)}))
