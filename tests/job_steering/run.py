"""A streamed-predict job for tests/e2e/test_job_steering.py: ``ROWS`` rows in batches of
``BATCH``, ``SLEEP`` seconds a batch (a ``keras.utils.Sequence``), into ``OUT``. It can be held and
broken at known batches (fetched by the process, counted from 1 in each run):

- ``GATE_AT``/``GATE``: at that batch it prints "waiting at the gate" and waits until the
  file ``GATE`` exists (a test pauses it there, deterministically);
- ``CRASH_AT``/``CRASHED``: at that batch, once (the marker file ``CRASHED`` says it did),
  the process dies (``os._exit(3)``: no cleanup, as a crash);
- ``KILL_AT``/``KILLED``: a comma-separated list of batches; in each run the chief kills
  itself with SIGKILL at the next one not yet done (``KILLED`` keeps one line per kill), so
  three runs die at three different points and the fourth completes.
"""

import os
import signal
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

class Rows(tf.keras.utils.Sequence):
    """The input, batch by batch: held or broken here, in the input (the model is the
    real one on Keras 2 and 3 alike)."""

    def __init__(self):
        super().__init__()
        self.calls = 0  # batches fetched by this process

    def __len__(self):
        return -(-rows // batch)

    def __getitem__(self, i):
        self.calls += 1
        if self.calls == int(env("GATE_AT", "0")) and not Path(env("GATE")).exists():
            print("waiting at the gate", flush=True)
            while not Path(env("GATE")).exists():
                time.sleep(0.05)
        if self.calls == int(env("CRASH_AT", "0")) and not Path(env("CRASHED")).exists():
            Path(env("CRASHED")).touch()
            os._exit(3)
        kills = [int(k) for k in env("KILL_AT", "").split(",") if k]
        if kills and context.distributed.rank == 0:
            marker = Path(env("KILLED"))
            done = len(marker.read_text().split()) if marker.exists() else 0
            if done < len(kills) and self.calls == kills[done]:
                with marker.open("a") as f:
                    f.write(f"{self.calls}\n")
                os.kill(os.getpid(), signal.SIGKILL)  # no cleanup at all
        time.sleep(sleep)
        return x[i * batch:(i + 1) * batch]


out = context.predict(model, Rows(), output=env("OUT"), batch_size=batch)
print("RESULT", out.rows, out.parts, out.resumed, flush=True)
context.close()
