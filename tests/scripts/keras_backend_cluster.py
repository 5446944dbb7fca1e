"""A backend-neutral Keras 3 script: the JAX and PyTorch engine on the master
(tests/e2e/test_keras_backends_cluster.py). ``KERAS_BACKEND`` (the experiment config's
``environment.environment_variables``) picks the backend; nothing here names one.

A dense net with dropout on 200 generated rows (13 global batches of 16 an epoch, the
last one 8 rows), validated on 40 of them. ``data:`` in the config steers it:

data.hold_at: [epoch, batch, dir]: at that batch's end (of the first run: the batch's index
    in its model.fit call) every process writes dir/reached and waits for dir/release (the
    test pauses the experiment meanwhile: a stop mid-epoch, whatever the load)

It prints ``KERAS_BACKEND_RAN <backend>`` after ``det.keras.init()``.
"""

import time
from pathlib import Path

import keras
import numpy as np

import det_sdk as det

context = det.keras.init(hparams={"learning_rate": 0.01, "global_batch_size": 16})
print(f"KERAS_BACKEND_RAN {keras.backend.backend()}", flush=True)
hp = context.hparams
data = context.config_data

rng = np.random.default_rng(0)
x = rng.normal(size=(200, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) > 0).astype("float32")
x, y = context.wrap_data(x, y)

model = keras.Sequential([
    keras.Input((8,)),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dropout(0.25),
    keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=context.wrap_optimizer(keras.optimizers.Adam(hp["learning_rate"])),
              loss="binary_crossentropy", metrics=["accuracy"])


class Hold(keras.callbacks.Callback):
    epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        hold = data.get("hold_at")
        if hold and [self.epoch, batch] == hold[:2]:
            Path(hold[2], "reached").touch()
            deadline = time.time() + 120
            while not Path(hold[2], "release").exists() and time.time() < deadline:
                time.sleep(0.05)


context.fit(model, x=x, y=y, epochs=1, validation_data=(x[:40], y[:40]), callbacks=[Hold()],
            batch_size=context.distributed.shard_batch_size(hp["global_batch_size"]))
context.close()
