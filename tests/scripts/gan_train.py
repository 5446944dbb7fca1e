"""A GAN-style model for the tests: a custom train_step with two wrapped optimizers.

Run as one process or under ``horovodrun -np 2``: the same global batch (16), so the
averaged updates must equal one process's. The latent input is a fixed function of
the real batch (no random draws), which makes 1-process and 2-process runs
comparable sample by sample. Rank 0 writes $GAN_OUT (JSON): the History, and
whether every process ended with bit-identical weights and optimizer slots.
Written against the public Keras API only, so it runs on Keras 2 and Keras 3.
"""

import json
import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

import det_sdk as det

tf.config.experimental.enable_op_determinism()
context = det.keras.init(hparams={"global_batch_size": 16}, seed=3,
                         checkpoint_period=False)
dist = context.distributed
rng = np.random.default_rng(0)
x = rng.normal(size=(128, 4)).astype("float32")  # "real" samples
y = np.zeros((128, 1), "float32")  # unused by the GAN; numpy input needs targets
x_val = x[:32]


class GAN(keras.Model):
    def __init__(self):
        super().__init__()
        self.generator = keras.Sequential([keras.Input((2,)),
                                           keras.layers.Dense(8, activation="tanh"),
                                           keras.layers.Dense(4)])
        self.discriminator = keras.Sequential([keras.Input((4,)),
                                               keras.layers.Dense(8, activation="tanh"),
                                               keras.layers.Dense(1)])
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer

    def call(self, inputs):
        return self.discriminator(inputs)

    def _gan_losses(self, real):
        z = real[:, :2] * 0.5  # the latent: a fixed function of the real batch
        fake = self.generator(z)
        real_logits, fake_logits = self.discriminator(real), self.discriminator(fake)
        d_loss = (self.bce(tf.ones_like(real_logits), real_logits)
                  + self.bce(tf.zeros_like(fake_logits), fake_logits))
        return z, d_loss

    def train_step(self, data):
        real = data[0] if isinstance(data, tuple) else data
        with tf.GradientTape() as tape:
            z, d_loss = self._gan_losses(real)
        d_vars = self.discriminator.trainable_weights
        grads = tape.gradient(d_loss, d_vars)
        self.d_optimizer.apply_gradients(zip(grads, d_vars))
        with tf.GradientTape() as tape:
            logits = self.discriminator(self.generator(z))
            g_loss = self.bce(tf.ones_like(logits), logits)
        g_vars = self.generator.trainable_weights
        grads = tape.gradient(g_loss, g_vars)
        self.g_optimizer.apply_gradients(zip(grads, g_vars))
        return {"d_loss": d_loss, "g_loss": g_loss}

    def test_step(self, data):
        real = data[0] if isinstance(data, tuple) else data
        return {"d_loss": self._gan_losses(real)[1]}


gan = GAN()
gan.compile(
    d_optimizer=context.wrap_optimizer(keras.optimizers.Adam(0.01)),
    g_optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.05, momentum=0.9)),
)
xs, ys = context.wrap_data(x, y)
bs = dist.shard_batch_size(context.hparams["global_batch_size"])
hist = context.fit(gan, x=xs, y=ys, batch_size=bs, epochs=3,
                   validation_data=(x_val, np.zeros((32, 1), "float32")),
                   validation_batch_size=32, verbose=0)  # test_step's value: its last batch

state = [v.numpy() for v in gan.weights]
for opt in (gan.d_optimizer, gan.g_optimizer):
    variables = opt.variables() if callable(opt.variables) else opt.variables
    state += [v.numpy() for v in variables]
mine = b"".join(np.ascontiguousarray(a).tobytes() for a in state)
every = dist.allgather(mine)
if dist.is_chief and os.environ.get("GAN_OUT"):
    with open(os.environ["GAN_OUT"], "w") as f:
        json.dump({"history": {k: [float(v) for v in vs] for k, vs in hist.history.items()},
                   "ranks_identical": all(b == every[0] for b in every),
                   "processes": dist.size}, f)
