"""A tiny trial for the cluster tests; `data:` in the config steers it.

data.sleep_per_epoch: seconds to wait at each epoch end (to catch it running)
data.sleep_per_batch: seconds to wait after each batch (to pause it mid-epoch)
data.hold_at: [epoch, batch, dir(, seconds)]: at that batch's end write dir/reached and wait
    for dir/release, at most seconds (120) (the test pauses meanwhile: a stop at a known
    batch, whatever the load)
data.fail_once_at_epoch: crash (exit 3) at that epoch's end, once per trial
data.fail_rank: with fail_once_at_epoch, only this Horovod rank crashes
data.fail_once_at_train_end: crash (exit 3) once per trial when model.fit ends, 3 s
    after its last epoch's checkpoint was taken (written and reported meanwhile), before
    the searcher hears its length is done: the relaunch resumes from that final checkpoint
data.weights_out: where rank 0 saves the final weights (.npz)
data.csv_log: a relative path for a CSVLogger (det_sdk keeps it with the trial)
hparam handicap: added to val_loss as val_handicapped_loss, a searcher metric whose
    order between trials the test knows in advance
"""

import os
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

import det_sdk as det

tf.config.experimental.enable_op_determinism()
context = det.keras.init(hparams={"learning_rate": 0.05, "global_batch_size": 16})
hp = context.training.hparams
data = context.config_data

rng = np.random.default_rng(0)
x = rng.normal(size=(160, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) > 0).astype("float32")
xs, ys = context.wrap_data(x, y)
xv, yv = context.wrap_data(x[:40], y[:40])

model = tf.keras.Sequential([
    tf.keras.Input((8,)),
    tf.keras.layers.Dense(16, activation="relu"),
    tf.keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(context.wrap_optimizer(tf.keras.optimizers.Adam(hp["learning_rate"])),
              "binary_crossentropy", metrics=["accuracy"])


class Steer(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(float(data.get("sleep_per_batch", 0)))
        hold = data.get("hold_at")
        if hold and [self.epoch, batch] == hold[:2]:
            Path(hold[2], "reached").write_text("x")
            deadline = time.time() + (float(hold[3]) if len(hold) > 3 else 120)
            while not Path(hold[2], "release").exists() and time.time() < deadline:
                time.sleep(0.05)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and "val_loss" in logs and "handicap" in hp:
            logs["val_handicapped_loss"] = logs["val_loss"] + hp["handicap"]
        time.sleep(float(data.get("sleep_per_epoch", 0)))
        marker = Path("crashed-once")
        rank_fails = data.get("fail_rank", context.distributed.rank) == context.distributed.rank
        if data.get("fail_once_at_epoch") == epoch and rank_fails and not marker.exists():
            marker.write_text("x")
            os._exit(3)

    def on_train_end(self, logs=None):
        marker = Path("crashed-at-train-end")
        if data.get("fail_once_at_train_end") and not marker.exists():
            marker.write_text("x")
            time.sleep(3)
            os._exit(3)


callbacks = [Steer()]
if data.get("csv_log"):
    callbacks.insert(0, tf.keras.callbacks.CSVLogger(data["csv_log"]))
hist = context.fit(model, x=xs, y=ys, batch_size=context.distributed.shard_batch_size(
    hp["global_batch_size"]), epochs=1, validation_data=(xv, yv), callbacks=callbacks,
    verbose=0)
# The proposal's own use of the History: it must hold the whole run's epochs also in a
# process relaunched from the final checkpoint, which trains nothing (issue 11, L3).
print("final val_loss", hist.history["val_loss"][-1], "epochs", hist.epoch, flush=True)
if context.distributed.is_chief and data.get("weights_out"):
    np.savez(data["weights_out"], *model.get_weights())
print("rank", context.distributed.rank, "done")
