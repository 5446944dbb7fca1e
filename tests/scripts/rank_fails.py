"""Rank 1 raises before training while rank 0 trains: the whole run must fail, not hang."""

import numpy as np
import tensorflow as tf

import det_sdk as det

context = det.keras.init(hparams={}, seed=1)
if context.distributed.rank == 1:
    raise ValueError("boom on rank 1")

x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile(context.wrap_optimizer(tf.keras.optimizers.SGD(0.1)), "mse")
xs, ys = context.wrap_data(x, x[:, :1])
context.fit(model, x=xs, y=ys, epochs=1000, validation_data=(x, x[:, :1]), verbose=0)
