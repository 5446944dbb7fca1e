"""A backend-neutral Keras script (``import keras``) for the JAX and PyTorch engine's tests.

Environment: ``DROPOUT`` (0/1), ``KILL_AT`` (SIGTERM itself after that many batches on
rank 0), ``EPOCHS``, ``ROWS``, ``MIXED`` (a mixed-precision policy), ``EMA`` (1, the
default: a learning-rate schedule, EMA, gradient accumulation and clipping; 0: plain
Adam), ``PREDICT_OUT`` (stream the validation rows' predictions there), ``FIT_TWICE``
(1: a second ``context.fit``, its refusal recorded), ``CALLBACKS``
(1: EarlyStopping with restore_best_weights and ReduceLROnPlateau on ``val_loss``, set
so that only the first epoch counts as an improvement), ``OUT`` (rank 0 writes its
weights, History, predictions, evaluations, final learning rate and the frameworks it
loaded there as ``.npz``/``.json``).
"""

import json
import os
import sys

import keras
import numpy as np

import det_sdk as det

context = det.keras.init(hparams={"learning_rate": 0.01, "global_batch_size": 16}, seed=7)
hp = context.training.hparams
rows = int(os.environ.get("ROWS", "200"))
rng = np.random.default_rng(0)
x = rng.normal(size=(rows, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
x_val, y_val = x[:48], y[:48]
x, y = context.wrap_data(x, y)
if os.environ.get("MIXED"):  # "mixed_float16" (a loss scale) or "mixed_bfloat16"
    keras.mixed_precision.set_global_policy(os.environ["MIXED"])
layers = [keras.Input((8,)), keras.layers.Dense(16, activation="relu")]
if os.environ.get("DROPOUT", "1") == "1":
    layers.append(keras.layers.Dropout(0.2))
model = keras.Sequential([*layers, keras.layers.Dense(1, dtype="float32")])
learning_rate = hp["learning_rate"]
options = {}
if os.environ.get("EMA", "1") == "1":  # round 5's options: each is state a resume restores
    learning_rate = keras.optimizers.schedules.ExponentialDecay(learning_rate, 5, 0.9)
    options = {"use_ema": True, "ema_momentum": 0.9, "gradient_accumulation_steps": 2,
               "clipnorm": 1.0}
model.compile(optimizer=context.wrap_optimizer(keras.optimizers.Adam(learning_rate, **options)),
              loss="mse", metrics=["mae", "cosine_similarity"])
kill_at = int(os.environ.get("KILL_AT", "0"))


class KillAt(keras.callbacks.Callback):
    """SIGTERM to this process after ``kill_at`` batches, as a user's Ctrl-C or a scheduler."""

    seen = 0

    def on_train_batch_end(self, batch, logs=None):
        KillAt.seen += 1
        if kill_at and KillAt.seen == kill_at and context.distributed.rank == 0:
            os.kill(os.getpid(), 15)


callbacks = [KillAt()]
if os.environ.get("CALLBACKS") == "1":
    # min_delta this large: no epoch after the first improves, so the counters decide:
    # the LR halves after epochs 2 and 4 (0-based), training stops after epoch 4
    callbacks += [keras.callbacks.EarlyStopping("val_loss", min_delta=1e9, patience=4,
                                                restore_best_weights=True),
                  keras.callbacks.ReduceLROnPlateau("val_loss", factor=0.5, patience=2,
                                                    min_delta=1e9)]
history = context.fit(model, x=x, y=y,
                      batch_size=context.distributed.shard_batch_size(hp["global_batch_size"]),
                      epochs=int(os.environ.get("EPOCHS", "3")),
                      validation_data=(x_val, y_val), callbacks=callbacks, verbose=0)
second_fit = None
if os.environ.get("FIT_TWICE") == "1":  # a second fit in one run: refused, naming what to do
    try:
        context.fit(model, x=x, y=y, epochs=1, verbose=0)
    except det.errors.DetSdkError as err:
        second_fit = str(err)
predictions = context.predict(model, x_val[:8], verbose=0)  # every process
if os.environ.get("PREDICT_OUT"):  # streamed: 48 rows in parts of 5, the last of 3
    context.predict(model, x_val, output=os.environ["PREDICT_OUT"], batch_size=5)
# in Keras's order, [loss, *metrics], as model.evaluate returns it
evaluated = [float(v) for v in context.evaluate(model, x_val, y_val, verbose=0)]
plain = [float(v) for v in model.evaluate(x_val, y_val, verbose=0)]
if context.distributed.rank == 0 and os.environ.get("OUT"):
    out = os.environ["OUT"]
    np.savez(out + ".npz", *model.get_weights(),
             predictions=np.asarray(predictions))
    with open(out + ".json", "w") as f:
        json.dump({"history": history.history, "trial_id": context.trial_id,
                   "evaluated": evaluated, "plain_evaluate": plain,
                   "second_fit": second_fit,
                   "learning_rate": float(keras.ops.convert_to_numpy(
                       model.optimizer.learning_rate)),
                   "loaded": sorted(m for m in ("tensorflow", "horovod", "jax", "torch")
                                    if m in sys.modules)}, f)
