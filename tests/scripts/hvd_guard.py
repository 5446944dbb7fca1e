"""Scripts that would train silently wrong under several processes; det_sdk must stop them.

GUARD_CASE is a comma-separated list of cases, run in turn on fresh models in one run:
  unwrapped  compiled with optimizer="adam" (never wrapped): refused at fit. Put it first:
             the refusal is for a script that wrapped no optimizer (once another case
             wrapped one, the divergence guard stops it after the first step instead).
  xla        compiled with jit_compile=True: Horovod's ops have no XLA kernels, so det_sdk
             turns XLA off, says so, and trains.
  float8     model.quantize("float8") (Keras 3; on Keras 2 the case trains unquantized):
             its amax histories' "gradients" would be averaged, not maxed, over the
             processes; refused at fit, naming the variables.
  bypass     a wrapped optimizer exists, but the custom train_step applies a second,
             unwrapped one: the divergence guard stops it after the first step.
  extra      rank 1 calls one det_sdk collective (an allgather) more than rank 0, before
             the fit: it meets rank 0's first collective in the fit, and both raise a
             CollectiveMismatchError naming each one's caller (it would pair silently).
A case that det_sdk stops ends its fit with a DetSdkError on every rank (they raise
together), which the script records and goes on to the next case; put ``bypass`` last,
since its fit stops mid-epoch. GUARD_THEN_RANK_FAILS=1: after the cases, rank 1 raises
while rank 0 trains on (the run must fail, not hang). GUARD_OUT (optional): rank 0 writes
per case ``{"trained": bool, "error": str | None}`` there.
The run exits 1 if det_sdk stopped any case.
"""

import json
import os
import sys
import traceback

import numpy as np
import tensorflow as tf
from tensorflow import keras

import det_sdk as det
from det_sdk.errors import DetSdkError

context = det.keras.init(hparams={}, seed=1, checkpoint_period=False)
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
xs, ys = context.wrap_data(x, y)


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


def model_for(case):
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Dense(8)(inputs))
    if case == "unwrapped":
        model = keras.Model(inputs, outputs)
        model.compile(optimizer="adam", loss="binary_crossentropy")
    elif case in ("xla", "plain", "float8", "extra"):
        model = keras.Model(inputs, outputs)
        if case == "float8" and hasattr(model, "quantize"):
            model.quantize("float8")
        model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.1)),
                      loss="binary_crossentropy", jit_compile=case == "xla")
    else:
        model = Bypass(inputs, outputs)
        model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.1)),
                      loss="binary_crossentropy")
        model.plain = keras.optimizers.SGD(0.1)
    return model


results = {}
for case in os.environ["GUARD_CASE"].split(","):
    result = results[case] = {"trained": False, "error": None}
    if case == "float8":
        result["quantized"] = hasattr(keras.Model, "quantize")
    try:
        model = model_for(case)
        if case == "extra" and context.distributed.rank == 1:
            context.distributed.allgather("one more than rank 0")
        context.fit(model, x=xs, y=ys, batch_size=8, epochs=2,
                    validation_data=(x, y), verbose=0)
        result["trained"] = True
        print(f"{case}: trained to the end", flush=True)
    except DetSdkError as e:
        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {e}"
if context.distributed.is_chief and os.environ.get("GUARD_OUT"):
    with open(os.environ["GUARD_OUT"], "w") as f:
        json.dump(results, f)
# every rank waits for rank 0's file: horovodrun ends the others once one exits non-zero
context.distributed.allgather(0)
if os.environ.get("GUARD_THEN_RANK_FAILS") == "1":
    # rank 1 raises while rank 0 trains on (its collectives wait for rank 1): the whole
    # run must fail, not hang
    if context.distributed.rank == 1:
        raise ValueError("boom on rank 1")
    context.fit(model_for("plain"), x=xs, y=ys, batch_size=8, epochs=1000,
                validation_data=(x, y), verbose=0)
sys.exit(1 if any(r["error"] for r in results.values()) else 0)
