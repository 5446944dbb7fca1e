"""The shape of Horovod's own Keras example (examples/tensorflow2/tensorflow2_keras_mnist.py)
as docs/migrating.md ports it, for the cluster's pause test (tests/e2e/test_mixed_precision.py).

What it keeps of the example: each process reads its own copy of the data (the example's
``'mnist-%d.npz' % hvd.rank()``), a ``repeat().shuffle().batch()`` pipeline that is not
wrapped, ``steps_per_epoch`` divided by the number of processes, the learning rate scaled
by it, and a per-batch warmup callback (Horovod's ``LearningRateWarmupCallback``, which
reads ``optimizer.lr`` and so fails on Keras 3, rewritten as the port table says).

data.mixed_precision: a Keras policy set before the model is built ("mixed_float16")
data.hold_at: [epoch, batch, dir]: at that batch's end write dir/reached and wait for
    dir/release (the test pauses the trial meanwhile)
data.weights_out: where rank 0 saves the final weights and optimizer variables (.npz)
"""

import json
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

import det_sdk as det
from det_sdk.keras import _compat  # the optimizer's variables on Keras 2 and 3

keras = tf.keras
tf.config.experimental.enable_op_determinism()
context = det.keras.init()
data = context.config_data
size, rank = context.distributed.size, context.distributed.rank
if data.get("mixed_precision"):
    keras.mixed_precision.set_global_policy(data["mixed_precision"])

rng = np.random.default_rng(100 + rank)  # this process's own file
x = rng.normal(size=(256, 12)).astype("float32")
y = (x[:, :3].sum(axis=1) > 0).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(200).batch(16)

model = keras.Sequential([
    keras.Input((12,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(10),
    keras.layers.Activation("softmax", dtype="float32"),  # float32 outputs under a policy
])
base_lr = 0.001 * size
model.compile(context.wrap_optimizer(keras.optimizers.Adam(base_lr)),
              "sparse_categorical_crossentropy", metrics=["accuracy"])


class Warmup(keras.callbacks.Callback):
    """The learning rate rises linearly over the first epoch's batches (Horovod's warmup)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        done = (self.epoch * self.params["steps"] + batch + 1) / self.params["steps"]
        self.model.optimizer.learning_rate.assign(base_lr * min(1.0, done))


class Hold(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        hold = data.get("hold_at")
        if hold and [self.epoch, batch] == hold[:2]:
            Path(hold[2], "reached").write_text("x")
            deadline = time.time() + 120
            while not Path(hold[2], "release").exists() and time.time() < deadline:
                time.sleep(0.05)


hist = context.fit(model, dataset, steps_per_epoch=32 // size, epochs=1,
                   callbacks=[Warmup(), Hold()], validation_data=(x[:32], y[:32]), verbose=0)
if context.distributed.is_chief and data.get("weights_out"):
    state = _compat.optimizer_variables(model.optimizer, model.trainable_variables)
    np.savez(data["weights_out"], *model.get_weights(), *[np.asarray(v.numpy()) for v in state])
    # the whole run's History (every epoch's training averages, a paused one's too)
    Path(data["weights_out"] + ".history.json").write_text(json.dumps(hist.history))
