"""Keras scripts in the shapes keras-io writes them (issue 36), written for these tests.

Each function is one habit of those scripts, run through ``context.fit``:

* ``shuffled``: the data shuffled with ``np.random.permutation`` before ``wrap_data``,
  a BatchNormalization layer, ``validation_split``;
* ``GAN``: a custom ``train_step`` with two optimizers it uses (and so builds) on first use,
  no validation data;
* ``NoCall``: a model with no ``call()`` whose ``train_step`` calls layers made without an
  input shape (they create their weights in the first step);
* ``add_loss_model``: a layer that adds its own loss, dict inputs, no targets;
* ``classifier``: EarlyStopping + ReduceLROnPlateau + ModelCheckpoint.

Imported by the in-process tests; run as a script (one process or ``horovodrun -np 2``)
with ``SHAPES`` (comma-separated: shuffled, nocall, gan, addloss) and ``SHAPES_OUT`` (rank 0 writes
JSON there); ``SHAPES_UNSEEDED=1`` shuffles with an unseeded generator instead;
``SHAPES_STOP=epoch,batch`` stops the GAN there (SIGTERM to rank 0).
Written against the public Keras API only: Keras 2 and Keras 3.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow import keras

import det_sdk as det


def make_data(rows: int = 96, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4)).astype("float32")
    y = (x[:, :1] + 0.5 * x[:, 1:2] > 0).astype("float32")
    return x, y


# --- the habits -----------------------------------------------------------------------------


def shuffled(context: Any, epochs: int = 2, unseeded: bool = False) -> dict[str, Any]:
    """keras-io: ``idx = np.random.permutation(len(x))`` then train on ``x[idx]``."""
    x, y = make_data()
    x = np.concatenate([x, np.arange(len(x), dtype="float32")[:, None]], axis=1)  # row ids
    rng = np.random.default_rng() if unseeded else np.random
    idx = rng.permutation(len(x))
    x, y = x[idx], y[idx]
    xs, ys = context.wrap_data(x, y)
    ids = sorted(int(i) for i in np.asarray(xs)[:, -1])
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8),
                              keras.layers.BatchNormalization(), keras.layers.Activation("relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(context.wrap_optimizer(keras.optimizers.SGD(0.05)), "binary_crossentropy")
    bs = context.distributed.shard_batch_size(16)
    hist = context.fit(model, xs, ys, batch_size=bs, epochs=epochs, validation_split=0.25,
                       verbose=0)
    bn = next(layer for layer in model.layers
              if isinstance(layer, keras.layers.BatchNormalization))
    return {"ids": context.distributed.allgather(ids),
            "val_loss": [float(v) for v in hist.history["val_loss"]],
            "moving": [w.tolist() for w in bn.get_weights()[2:]],
            "moving_every": context.distributed.allgather(
                [w.tolist() for w in bn.get_weights()[2:]])}


class GAN(keras.Model):
    """Two optimizers given to ``compile`` and used only in ``train_step``."""

    def __init__(self) -> None:
        super().__init__()
        self.generator = keras.Sequential([keras.Input((2,)), keras.layers.Dense(8, "tanh"),
                                           keras.layers.Dense(4)])
        self.discriminator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, "tanh"),
                                               keras.layers.Dense(1)])
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)

    def compile(self, d_optimizer: Any, g_optimizer: Any) -> None:
        super().compile()
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer

    def call(self, inputs: Any) -> Any:
        return self.discriminator(inputs)

    def train_step(self, data: Any) -> dict[str, Any]:
        real = data[0] if isinstance(data, tuple) else data
        z = real[:, :2] * 0.5  # the latent: a fixed function of the batch (no draws)
        with tf.GradientTape() as tape:
            real_logits = self.discriminator(real)
            fake_logits = self.discriminator(self.generator(z))
            d_loss = (self.bce(tf.ones_like(real_logits), real_logits)
                      + self.bce(tf.zeros_like(fake_logits), fake_logits))
        d_vars = self.discriminator.trainable_weights
        self.d_optimizer.apply_gradients(zip(tape.gradient(d_loss, d_vars), d_vars))
        with tf.GradientTape() as tape:
            logits = self.discriminator(self.generator(z))
            g_loss = self.bce(tf.ones_like(logits), logits)
        g_vars = self.generator.trainable_weights
        self.g_optimizer.apply_gradients(zip(tape.gradient(g_loss, g_vars), g_vars))
        return {"d_loss": d_loss, "g_loss": g_loss}


def fit_gan(context: Any, epochs: int = 3, callbacks: Any = ()) -> tuple[GAN, Any]:
    """A GAN trained without validation data (as keras-io's GANs are)."""
    x, _ = make_data(64, seed=1)
    gan = GAN()
    gan.compile(d_optimizer=context.wrap_optimizer(keras.optimizers.Adam(0.01)),
                g_optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.05, momentum=0.9)))
    bs = context.distributed.shard_batch_size(16)
    hist = context.fit(gan, context.wrap_data(x), batch_size=bs, epochs=epochs, verbose=0,
                       callbacks=list(callbacks))
    return gan, hist


def gan_state(gan: GAN) -> list[np.ndarray]:
    """Weights and both optimizers' variables (their slots: momentum, Adam's moments)."""
    state = [np.asarray(w) for w in gan.get_weights()]
    for opt in (gan.d_optimizer, gan.g_optimizer):
        variables = opt.variables() if callable(opt.variables) else opt.variables
        state += [np.asarray(v.numpy()) for v in variables]
    return state


class NoCall(keras.Model):
    """No ``call()``; its layers have no input shape: they are built in the first step."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(1)
        self.tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self) -> list[Any]:
        return [self.tracker]

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.out(self.hidden(x)) - y))
        variables = self.hidden.trainable_weights + self.out.trainable_weights
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        self.tracker.update_state(loss)
        return {"loss": self.tracker.result()}


def fit_nocall(context: Any | None, epochs: int = 2, batch_size: int = 16,
               callbacks: Any = ()) -> tuple[NoCall, Any]:
    """Through ``context.fit``, or (``context`` None) plain ``model.fit``; no shuffling, so
    both see the batches in the same order."""
    x, y = make_data()
    model = NoCall()
    opt = keras.optimizers.Adam(0.01)
    model.compile(optimizer=context.wrap_optimizer(opt) if context else opt)
    if context is None:
        return model, model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False,
                                verbose=0)
    xs, ys = context.wrap_data(x, y)
    hist = context.fit(model, xs, ys, batch_size=context.distributed.shard_batch_size(batch_size),
                       epochs=epochs, shuffle=False, verbose=0, callbacks=list(callbacks))
    return model, hist


class AddOwnLoss(keras.layers.Layer):
    """A layer that adds the loss itself (``self.add_loss``), as keras-io's VAEs/CTC do."""

    def call(self, inputs: Any) -> Any:
        a, b = inputs
        self.add_loss(tf.reduce_mean(tf.square(a - b)))
        return a


def add_loss_model() -> Any:
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    out = AddOwnLoss()([keras.layers.Dense(4, name="proj")(a), b])
    return keras.Model({"a": a, "b": b}, out)


def add_loss_data() -> dict[str, np.ndarray]:
    x, _ = make_data(64, seed=2)
    return {"a": x, "b": np.tanh(x[:, ::-1]).copy()}


def classifier() -> Any:
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, "relu"),
                             keras.layers.Dense(1, "sigmoid")])


class StopOnBatch(keras.callbacks.Callback):
    """SIGTERM to this process at the end of batch ``batch`` of epoch ``epoch``: det_sdk
    stops there (or, on an epoch's last batch, at that epoch's end)."""

    def __init__(self, epoch: int, batch: int) -> None:
        super().__init__()
        self.at, self.epoch = (epoch, batch), -1

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if (self.epoch, batch) == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


# --- as a script: one process or several -------------------------------------------------


def main() -> None:
    tf.config.experimental.enable_op_determinism()
    context = det.keras.init(seed=11, checkpoint_period=False)
    out: dict[str, Any] = {"size": context.distributed.size}
    for shape in os.environ["SHAPES"].split(","):
        if shape == "shuffled":
            out["shuffled"] = shuffled(context, unseeded=os.environ.get("SHAPES_UNSEEDED") == "1")
        elif shape == "nocall":
            model, hist = fit_nocall(context)
            # trainable ones: Keras 2 lists the loss tracker's total and count among the
            # weights (each process's own)
            out["nocall"] = {"weights": [w.numpy().tolist() for w in model.trainable_weights],
                             "loss": [float(v) for v in hist.history["loss"]]}
        elif shape == "gan":
            stop = os.environ.get("SHAPES_STOP")  # "epoch,batch": SIGTERM to rank 0 there
            at = [int(v) for v in stop.split(",")] if stop else None
            callbacks = [StopOnBatch(*at)] if at and context.distributed.is_chief else []
            gan, hist = fit_gan(context, callbacks=callbacks)
            out["gan"] = {"state": [a.tolist() for a in gan_state(gan)],
                          "d_loss": [float(v) for v in hist.history["d_loss"]]}
        elif shape == "addloss":  # no batch_size, no targets, no validation: as keras-io
            model = add_loss_model()
            model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.1)))
            context.fit(model, context.wrap_data(add_loss_data()), epochs=2, shuffle=False,
                        verbose=0)
            out["addloss"] = {"weights": [w.tolist() for w in model.get_weights()]}
    if context.distributed.is_chief:
        with open(os.environ["SHAPES_OUT"], "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
