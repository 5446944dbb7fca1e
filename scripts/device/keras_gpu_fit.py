"""A bigger variant of tests/scripts/keras_backend_fit.py for scripts/device/keras_gpu_check.sh.

The same backend-neutral ``context.fit`` (``import keras``; KERAS_BACKEND=jax|torch) on a
wider MLP, with what a GPU run needs to repeat itself bit for bit: ``DETERMINISTIC=1``
calls ``torch.use_deterministic_algorithms(True)`` on PyTorch (with
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` set by the caller; on JAX the caller sets
``XLA_FLAGS=--xla_gpu_deterministic_ops=true``).

Environment: ``DROPOUT`` (0/1), ``KILL_AT`` (rank 0 SIGTERMs itself after that many
batches), ``EPOCHS`` (3), ``ROWS`` (8192), ``OUT`` (rank 0 writes ``OUT.npz``: weights and
predictions, ``OUT.json``: History, devices, steps/s).
"""

import json
import os
import sys
import time

import keras
import numpy as np

if keras.backend.backend() == "torch" and os.environ.get("DETERMINISTIC") == "1":
    import torch

    torch.use_deterministic_algorithms(True)

import det_sdk as det

context = det.keras.init(hparams={"learning_rate": 1e-3, "global_batch_size": 64}, seed=7)
hp = context.training.hparams
rows = int(os.environ.get("ROWS", "8192"))
rng = np.random.default_rng(0)
x = rng.normal(size=(rows, 32)).astype("float32")
y = np.tanh(x @ rng.normal(size=(32, 1))).astype("float32")
x_val, y_val = x[:512], y[:512]
x, y = context.wrap_data(x, y)
layers = [keras.Input((32,)), keras.layers.Dense(512, activation="relu")]
if os.environ.get("DROPOUT", "1") == "1":
    layers.append(keras.layers.Dropout(0.2))
model = keras.Sequential([*layers, keras.layers.Dense(512, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer=context.wrap_optimizer(keras.optimizers.Adam(hp["learning_rate"])),
              loss="mse", metrics=["mae"])
kill_at = int(os.environ.get("KILL_AT", "0"))
marks: list[float] = []


class KillAt(keras.callbacks.Callback):
    """SIGTERM to this process after ``kill_at`` batches; epoch-end times for steps/s."""

    seen = 0

    def on_train_batch_end(self, batch, logs=None):
        KillAt.seen += 1
        if kill_at and KillAt.seen == kill_at and context.distributed.rank == 0:
            os.kill(os.getpid(), 15)

    def on_epoch_end(self, epoch, logs=None):
        marks.append(time.perf_counter())


epochs = int(os.environ.get("EPOCHS", "3"))
batch = context.distributed.shard_batch_size(hp["global_batch_size"])
history = context.fit(model, x=x, y=y, batch_size=batch, epochs=epochs,
                      validation_data=(x_val, y_val), callbacks=[KillAt()], verbose=0)
predictions = context.predict(model, x_val[:8], verbose=0)


def devices():
    if keras.backend.backend() == "jax":
        import jax

        return [str(d) for d in jax.local_devices()]
    return [str(model.weights[0].value.device)]


if context.distributed.rank == 0 and os.environ.get("OUT"):
    out = os.environ["OUT"]
    np.savez(out + ".npz", *model.get_weights(), predictions=np.asarray(predictions))
    steps = (len(marks) - 1) * -(-rows // hp["global_batch_size"]) if len(marks) > 1 else 0
    with open(out + ".json", "w") as f:
        json.dump({"history": history.history, "trial_id": context.trial_id,
                   "processes": context.distributed.size, "devices": devices(),
                   "steps_per_s": steps / (marks[-1] - marks[0]) if steps else None,
                   "loaded": sorted(m for m in ("tensorflow", "horovod", "jax", "torch")
                                    if m in sys.modules)}, f)
context.close()
