"""Custom models as Keras's own examples write them (issue 28), ported with the README's lines.

* ``VAE``: a subclassed model with a custom ``train_step``/``test_step``, no ``call()``,
  no ``get_config`` (its ``__init__`` takes models), trained on x alone; its noise is
  drawn through Keras 3's ``SeedGenerator`` (Keras 2: a ``tf.random.Generator`` on the
  model), which checkpoints hold.
* ``Distiller``: its own ``compile(optimizer, metrics, student_loss_fn,
  distillation_loss_fn, alpha, temperature)``, ``train_step`` and ``test_step`` (which
  returns a plain tensor besides the metrics), and a ``get_config``/``from_config``, so
  ``load_checkpoint_model`` can rebuild it.

Imported by tests/integration/test_custom_models.py (one process, in-process); run as a script by
the same tests on one process and under ``horovodrun -np 2``:

  CUSTOM_MODEL       vae | distiller
  CUSTOM_OUT         where rank 0 writes its report (JSON): weights, History, evaluate's
                     logs, whether train_step ever saw a tuple where Keras passes a tensor
  CUSTOM_ROWS        samples (default 48); CUSTOM_BATCH: batch size per process (8)
  CUSTOM_STOP_EPOCH  SIGTERM to rank 0 at the end of this epoch (0-based)
  DET_RUNS_DIR, DET_RESUME  as for any script
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import numpy as np
import tensorflow as tf

import det_sdk as det
from det_sdk.keras import _compat

keras = _compat.keras
K3 = _compat.KERAS_MAJOR >= 3
LATENT = 2
TUPLES_SEEN: list[bool] = []  # per trace of VAE.train_step: was x-only data a tuple?


def _sample_noise(owner: Any, shape: Any) -> Any:
    if K3:
        return keras.random.normal(shape, seed=owner.seed_generator)
    return owner.gen.normal(shape)


class VAE(keras.Model):
    """Encoder -> (mean, log variance) -> sample -> decoder; loss = reconstruction + KL."""

    def __init__(self, encoder: Any, decoder: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.encoder, self.decoder = encoder, decoder
        if K3:
            self.seed_generator = keras.random.SeedGenerator(11)
        else:
            self.gen = tf.random.Generator.from_seed(11)
        self.total = keras.metrics.Mean(name="total_loss")
        self.recon = keras.metrics.Mean(name="reconstruction_loss")

    @property
    def metrics(self) -> list[Any]:
        return [self.total, self.recon]

    def _vae_losses(self, x: Any, noise: bool) -> tuple[Any, Any]:
        mean, log_var = self.encoder(x)
        z = mean
        if noise:
            z = mean + tf.exp(0.5 * log_var) * _sample_noise(self, tf.shape(mean))
        out = self.decoder(z)
        recon = tf.reduce_mean(tf.reduce_sum(tf.square(x - out), axis=1))
        kl = -0.5 * tf.reduce_mean(tf.reduce_sum(1 + log_var - tf.square(mean)
                                                 - tf.exp(log_var), axis=1))
        return recon + kl, recon

    def train_step(self, data: Any) -> dict[str, Any]:
        x = data  # x alone: the tensor itself, as Keras passes it
        TUPLES_SEEN.append(isinstance(data, (tuple, list)))
        with tf.GradientTape() as tape:
            total, recon = self._vae_losses(x, noise=True)
        grads = tape.gradient(total, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total.update_state(total)
        self.recon.update_state(recon)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data: Any) -> dict[str, Any]:
        total, recon = self._vae_losses(data, noise=False)
        self.total.update_state(total)
        self.recon.update_state(recon)
        return {m.name: m.result() for m in self.metrics}


def make_vae() -> VAE:
    inp = keras.Input((4,))
    h = keras.layers.Dense(8, activation="relu")(inp)
    encoder = keras.Model(inp, [keras.layers.Dense(LATENT)(h), keras.layers.Dense(LATENT)(h)])
    z = keras.Input((LATENT,))
    decoder = keras.Model(z, keras.layers.Dense(4)(keras.layers.Dense(8, activation="relu")(z)))
    return VAE(encoder, decoder)


class Distiller(keras.Model):
    """A student learning from a frozen teacher's softened predictions."""

    def __init__(self, student: Any, teacher: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.student, self.teacher = student, teacher

    def get_config(self) -> dict[str, Any]:
        return {"student": keras.layers.serialize(self.student),
                "teacher": keras.layers.serialize(self.teacher)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Distiller:
        return cls(keras.layers.deserialize(config["student"]),
                   keras.layers.deserialize(config["teacher"]))

    def compile(self, optimizer: Any, metrics: Any, student_loss_fn: Any,
                distillation_loss_fn: Any, alpha: float = 0.1, temperature: float = 3.0
                ) -> None:
        super().compile(optimizer=optimizer, metrics=metrics)
        self.student_loss_fn, self.distillation_loss_fn = student_loss_fn, distillation_loss_fn
        self.alpha, self.temperature = alpha, temperature

    def call(self, x: Any) -> Any:
        return self.student(x)

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y = data
        teacher_pred = self.teacher(x, training=False)
        with tf.GradientTape() as tape:
            pred = self.student(x, training=True)
            student_loss = self.student_loss_fn(y, pred)
            distill = self.distillation_loss_fn(
                tf.nn.softmax(teacher_pred / self.temperature, axis=1),
                tf.nn.softmax(pred / self.temperature, axis=1)) * self.temperature ** 2
            loss = self.alpha * student_loss + (1 - self.alpha) * distill
        grads = tape.gradient(loss, self.student.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.student.trainable_weights))
        results = dict(self.compute_metrics(x, y, pred, None))
        results.update(student_loss=student_loss, distillation_loss=distill)
        return results

    def test_step(self, data: Any) -> dict[str, Any]:
        x, y = data
        pred = self.student(x, training=False)
        student_loss = self.student_loss_fn(y, pred)
        results = dict(self.compute_metrics(x, y, pred, None))
        results["student_loss"] = student_loss  # a plain tensor, not a metric
        return results


def _classifier(width: int) -> Any:
    inp = keras.Input((4,))
    h = keras.layers.Dense(width, activation="relu")(inp)
    return keras.Model(inp, keras.layers.Dense(3)(h))


def make_distiller() -> Distiller:
    teacher, student = _classifier(16), _classifier(4)
    teacher.set_weights([np.full(w.shape, 0.1 * (i + 1), np.float32)
                         for i, w in enumerate(teacher.get_weights())])
    return Distiller(student, teacher)


def compile_distiller(model: Distiller, context: Any) -> None:
    model.compile(
        optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.1)),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="acc")],
        student_loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        distillation_loss_fn=keras.losses.KLDivergence(), alpha=0.3)


def data(n: int = 48) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 4)).astype("float32")
    return x, (np.argmax(x[:, :3], axis=1)).astype("int32")


class StopAfterEpoch(keras.callbacks.Callback):
    """SIGTERM to this process at the end of epoch ``epoch`` (0-based): det_sdk stops there."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


def fit_vae(context: Any, epochs: int = 3, callbacks: Any = (), rows: int = 48,
            batch_size: int = 8) -> tuple[VAE, Any]:
    x, _ = data(rows)
    model = make_vae()
    model.compile(optimizer=context.wrap_optimizer(keras.optimizers.Adam(0.01)))
    history = context.fit(model, context.wrap_data(x), batch_size=batch_size, epochs=epochs,
                          validation_data=(x[:16],), verbose=0, callbacks=list(callbacks))
    return model, history


def fit_distiller(context: Any, epochs: int = 3, callbacks: Any = (), rows: int = 48,
                  batch_size: int = 8) -> tuple[Distiller, Any]:
    x, y = data(rows)
    model = make_distiller()
    compile_distiller(model, context)
    history = context.fit(model, *context.wrap_data(x, y), batch_size=batch_size,
                          epochs=epochs, validation_data=(x[:20], y[:20]), verbose=0,
                          callbacks=list(callbacks))
    return model, history


def main() -> None:
    which = os.environ["CUSTOM_MODEL"]
    stop = int(os.environ.get("CUSTOM_STOP_EPOCH", "-1"))
    rows, batch = int(os.environ.get("CUSTOM_ROWS", "48")), int(os.environ.get("CUSTOM_BATCH", "8"))
    tf.config.experimental.enable_op_determinism()
    context = det.keras.init(seed=5)
    fit = fit_vae if which == "vae" else fit_distiller
    callbacks = [StopAfterEpoch(stop)] if stop >= 0 and context.distributed.rank == 0 else []
    model, history = fit(context, callbacks=callbacks, rows=rows, batch_size=batch)
    x, y = data(rows)
    # evaluate with batches of 7: a short last batch on each process
    logs = context.evaluate(model, x[:30], None if which == "vae" else y[:30], batch_size=7,
                            return_dict=True, verbose=0)
    if context.distributed.rank == 0:
        out = {"size": context.distributed.size,
               "weights": [w.tolist() for w in model.get_weights()],
               "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
               "evaluate": {k: float(v) for k, v in logs.items()},
               "tuples_seen": TUPLES_SEEN}
        with open(os.environ["CUSTOM_OUT"], "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    sys.exit(main())
