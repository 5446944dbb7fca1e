"""A streamed-predict job for tests/e2e/test_job_steering.py: ``ROWS`` rows in batches of
``BATCH``, ``SLEEP`` seconds a batch, into ``OUT``. It can be held and broken at known
batches (counted from 1 in each run of the process):

- ``GATE_AT``/``GATE``: at that batch it prints "waiting at the gate" and waits until the
  file ``GATE`` exists (a test pauses it there, deterministically);
- ``CRASH_AT``/``CRASHED``: at that batch, once (the marker file ``CRASHED`` says it did),
  the process dies (``os._exit(3)``: no cleanup, as a crash).
"""

import os
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

import det_sdk as det

env = os.environ.get
context = det.keras.init()
rows, batch, sleep = int(env("ROWS", "3000")), int(env("BATCH", "100")), float(env("SLEEP", "0"))
x = np.random.default_rng(0).normal(size=(rows, 4)).astype("float32")
inp = tf.keras.Input((4,))
model = tf.keras.Model(inp, tf.keras.layers.Dense(3)(tf.keras.layers.Dense(8, "tanh")(inp)))
w = np.random.default_rng(1)
model.set_weights([w.normal(size=v.shape).astype("float32") for v in model.get_weights()])

calls = 0
predict_on_batch = model.predict_on_batch


def held(inputs):
    global calls
    calls += 1
    if calls == int(env("GATE_AT", "0")) and not Path(env("GATE")).exists():
        print("waiting at the gate", flush=True)
        while not Path(env("GATE")).exists():
            time.sleep(0.05)
    if calls == int(env("CRASH_AT", "0")) and not Path(env("CRASHED")).exists():
        Path(env("CRASHED")).touch()
        os._exit(3)
    time.sleep(sleep)
    return predict_on_batch(inputs)


model.predict_on_batch = held
out = context.predict(model, x, output=env("OUT"), batch_size=batch)
print("RESULT", out.rows, out.parts, out.resumed, flush=True)
context.close()
