"""Training whose checkpoints take a while to write: ~40 MB of weights and Adam state.

For tests/e2e/test_checkpoint_writes.py, which kills this process while a checkpoint is
being written in the background. BIG_EPOCHS epochs (default 6), a checkpoint at
every epoch end; rank 0 writes the final weights to BIG_WEIGHTS_OUT (.npz).
"""

import os

import numpy as np
import tensorflow as tf

import det_sdk as det

tf.config.experimental.enable_op_determinism()
context = det.keras.init(hparams={}, seed=11)
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 1024)).astype("float32")
y = rng.normal(size=(64, 1)).astype("float32")
model = tf.keras.Sequential([
    tf.keras.Input((1024,)),
    tf.keras.layers.Dense(1024, activation="relu"),
    tf.keras.layers.Dense(1024, activation="relu"),
    tf.keras.layers.Dense(1),
])
model.compile(optimizer=context.wrap_optimizer(tf.keras.optimizers.Adam(1e-4)), loss="mse")
xs, ys = context.wrap_data(x, y)
context.fit(model, x=xs, y=ys, batch_size=16, epochs=int(os.environ.get("BIG_EPOCHS", "6")),
            validation_data=(x[:16], y[:16]), verbose=0)
if os.environ.get("BIG_WEIGHTS_OUT"):
    np.savez(os.environ["BIG_WEIGHTS_OUT"], *model.get_weights())
