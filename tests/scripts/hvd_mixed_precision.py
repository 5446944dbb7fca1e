"""Mixed precision on N processes (tests/e2e/test_mixed_precision.py).

Run as one process (the reference) and under `horovodrun -np 2`; rank 0 writes a JSON
report to $MP_OUT, one key per case, and the first case's final state to $MP_OUT.npz.

MP_CASES  comma-separated, each a fresh model trained in this process, in order:
          f16      mixed_float16; wrap_optimizer, then compile (Keras wraps det_sdk's
                   optimizer in its loss-scale optimizer)
          f16_own  mixed_float16; the script's own LossScaleOptimizer, then wrapped
          bf16     mixed_bfloat16 (no loss scaling)
          f16_rows mixed_float16, a regression (256 rows, Adam(1e-2), global batch 32, 4
                   epochs) whose first step's float16 gradients overflow at the default
                   scale on N processes when each averages its loss over its own rows
                   (issue 56): one process applies every step at scale 2**15
MP_STOP   "E:B": SIGTERM to rank 0 after batch B of epoch E (the first case; it is
          checkpointed and the run stops; run again with DET_RESUME=latest)
MP_EXTRA  rank 1 calls one det_sdk collective more than rank 0 (in a callback): the
          watchdog must end the run (DET_COLLECTIVE_TIMEOUT bounds it)

In the float16 cases one row (OVERFLOW_ROW) holds 1e5, beyond float16's range: the
step whose global batch holds it has non-finite gradients. On 2 processes that row is
rank 1's (odd position of the global batch): only rank 1's own gradients overflow, so
a per-process skip decision would differ between the ranks.
"""

import json
import os
import signal

import numpy as np
import tensorflow as tf

import det_sdk as det
from det_sdk.keras import _compat

keras = tf.keras
tf.config.experimental.enable_op_determinism()
context = det.keras.init(seed=5)
dist = context.distributed

GLOBAL_BATCH, ROWS, EPOCHS = 16, 64, 3
OVERFLOW_STEP = 2  # of each epoch (the data is not shuffled)
OVERFLOW_ROW = OVERFLOW_STEP * GLOBAL_BATCH + 5  # odd: rank 1's on 2 processes
rng = np.random.default_rng(0)
x = rng.normal(size=(ROWS, 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) > 0).astype("float32")
batch = dist.shard_batch_size(GLOBAL_BATCH)



class StopAt(keras.callbacks.Callback):
    def __init__(self, spec):
        super().__init__()
        self.epoch, self.batch = (int(v) for v in spec.split(":"))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, b, logs=None):
        if self._epoch == self.epoch and b + 1 == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)


class OneMore(keras.callbacks.Callback):
    """Rank 1 calls one det_sdk collective more than rank 0, in the second step: rank 0
    goes on into the third (its gradients' allreduce), rank 1 waits in the broadcast."""

    def on_train_batch_end(self, b, logs=None):
        if b == 1:
            dist.broadcast("one more than rank 0")


class Skips(keras.callbacks.Callback):
    """The steps (0-based, counted over epochs) the loss-scale optimizer skipped: those
    after which its scale dropped."""

    def __init__(self):
        super().__init__()
        self.skipped, self.scale, self.epoch = [], None, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, b, logs=None):
        # b: plain Keras's index in the epoch, after a mid-epoch resume too
        scale = loss_scale_state(self.model)
        scale = max(scale.values()) if scale else None
        if scale is not None and self.scale is not None and scale < self.scale:
            self.skipped.append(self.epoch * ROWS // GLOBAL_BATCH + b)
        self.scale = scale


def optimizer_state(model):
    """The optimizer's variables as det_sdk checkpoints them (on Keras 2 the loss scale
    is not among a loss-scale optimizer's ``variables``)."""
    return _compat.optimizer_variables(model.optimizer, model.trainable_variables)


def loss_scale_state(model):
    """The loss scale and its counter (Keras 3's and Keras 2's names)."""
    found = {}
    for v in optimizer_state(model):
        name = _compat.variable_name(v).split("/")[-1].split(":")[0]
        if any(k in name for k in ("dynamic_scale", "step_counter", "current_loss_scale",
                                   "good_steps")):
            found[name] = float(np.asarray(v.numpy()))
    return found


def run_rows():
    """The f16_rows case: steps applied, the loss scale, val_loss per epoch."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    r = np.random.default_rng(0)
    xr = r.normal(size=(256, 8)).astype("float32")
    yr = (xr @ r.normal(size=(8, 1)) + 0.1 * r.normal(size=(256, 1))).astype("float32")
    xs, ys = context.wrap_data(xr, yr)
    xv, yv = context.wrap_data(xr[:64], yr[:64])
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1, dtype="float32")])
    model.compile(optimizer=context.wrap_optimizer(keras.optimizers.Adam(1e-2)), loss="mse")
    hist = context.fit(model, x=xs, y=ys, batch_size=dist.shard_batch_size(32), epochs=4,
                       validation_data=(xv, yv), verbose=0)
    keras.mixed_precision.set_global_policy("float32")
    return model, {"iterations": int(model.optimizer.iterations.numpy()),
                   "loss_scale": loss_scale_state(model),
                   "val_loss": hist.history["val_loss"]}, []


def run(case, first):
    if case == "f16_rows":
        return run_rows()
    policy = "mixed_bfloat16" if case == "bf16" else "mixed_float16"
    keras.mixed_precision.set_global_policy(policy)
    data = x.copy()
    if case != "bf16":
        data[OVERFLOW_ROW] = 1e5
    xs, ys = context.wrap_data(data, y)
    inp = keras.Input((6,))
    h = keras.layers.Dense(16, activation="relu")(inp)
    out = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    model = keras.Model(inp, out)
    # bfloat16 keeps 8 bits of mantissa: each process's gradient sum over its 8 rows is
    # rounded apart from one process's over 16 (~2**-9 relative); a smaller step keeps
    # the weights within 1e-5 of one process's after 12 steps, as float16's do at 1e-3
    inner = keras.optimizers.Adam(1e-4 if case == "bf16" else 1e-3)
    if case == "f16_own":
        opt = context.wrap_optimizer(keras.mixed_precision.LossScaleOptimizer(inner))
    else:
        opt = context.wrap_optimizer(inner)
    model.compile(optimizer=opt, loss="binary_crossentropy")
    skips = Skips()
    callbacks = [skips]
    if os.environ.get("MP_EXTRA") and dist.rank == 1:
        callbacks.append(OneMore())
    if first and os.environ.get("MP_STOP") and dist.rank == 0:
        callbacks.append(StopAt(os.environ["MP_STOP"]))
    hist = context.fit(model, x=xs, y=ys, batch_size=batch, epochs=EPOCHS, shuffle=False,
                       callbacks=callbacks, verbose=0)
    weights = [w.astype("float64") for w in model.get_weights()]
    everyone = dist.allgather([float(w.sum()) for w in weights])
    keras.mixed_precision.set_global_policy("float32")
    state = [np.asarray(v.numpy()) for v in optimizer_state(model)]
    return model, {
        "loss": hist.history["loss"],
        "weights": [w.ravel().tolist() for w in weights],
        "ranks_identical": all(e == everyone[0] for e in everyone),
        "loss_scale": loss_scale_state(model),
        "skipped": skips.skipped,
        "iterations": int(model.optimizer.iterations.numpy()),
    }, state


report = {"size": dist.size}
for i, case in enumerate(os.environ.get("MP_CASES", "f16").split(",")):
    model, report[case], state = run(case, i == 0)
    if i == 0 and dist.is_chief:
        np.savez(os.environ["MP_OUT"] + ".npz", *model.get_weights(), *state)
if dist.is_chief:
    with open(os.environ["MP_OUT"], "w") as f:
        json.dump(report, f)
print("mixed precision: trained to the end")
