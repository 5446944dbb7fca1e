"""Scripts that would train silently wrong under several processes; det_sdk must stop them.

GUARD_CASE=unwrapped  compiled with optimizer="adam" (never wrapped): refused at fit.
GUARD_CASE=bypass     a wrapped optimizer exists, but the custom train_step applies a
                      second, unwrapped one: the divergence guard stops it after the
                      first step.
GUARD_CASE=xla        compiled with jit_compile=True: Horovod's ops have no XLA kernels,
                      so det_sdk turns XLA off, says so, and trains.
"""

import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

import det_sdk as det

context = det.keras.init(hparams={}, seed=1, checkpoint_period=False)
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
xs, ys = context.wrap_data(x, y)
case = os.environ["GUARD_CASE"]


class Bypass(keras.Model):
    """Trains its weights with a plain optimizer the context never saw."""

    def train_step(self, data):
        xb, yb = data[0], data[1]
        with tf.GradientTape() as tape:
            loss = keras.losses.binary_crossentropy(yb, self(xb, training=True))
            loss = tf.reduce_mean(loss)
        grads = tape.gradient(loss, self.trainable_weights)
        self.plain.apply_gradients(zip(grads, self.trainable_weights))
        return {"loss": loss}


inputs = keras.Input((4,))
outputs = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Dense(8)(inputs))
if case == "unwrapped":
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="binary_crossentropy")
elif case == "xla":
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.1)),
                  loss="binary_crossentropy", jit_compile=True)
else:
    model = Bypass(inputs, outputs)
    model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.1)),
                  loss="binary_crossentropy")
    model.plain = keras.optimizers.SGD(0.1)
context.fit(model, x=xs, y=ys, batch_size=8, epochs=2, validation_data=(x, y), verbose=0)
print("trained to the end")
