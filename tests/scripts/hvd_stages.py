"""Three stages (teacher, student on the teacher's outputs, baseline) for the Horovod test.

STAGES_STOP_AT: SIGTERM to rank 0 at the end of this student epoch (0-based)
STAGES_WEIGHTS_OUT: where rank 0 saves the three models' final weights (.npz)
Plus det_sdk's own: DET_RUNS_DIR, DET_RESUME.
"""

import os
import signal

import numpy as np
import tensorflow as tf

import det_sdk as det

tf.config.experimental.enable_op_determinism()
context = det.keras.init(seed=77)
rng = np.random.default_rng(0)
x = rng.normal(size=(96, 6)).astype("float32")
y = np.tanh(x @ rng.normal(size=(6, 1))).astype("float32")
xv, yv = x[:32], y[:32]
batch = context.distributed.shard_batch_size(16)


def model(width):
    m = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(width, "tanh"),
                             tf.keras.layers.Dense(1)])
    m.compile(context.wrap_optimizer(tf.keras.optimizers.SGD(0.05, momentum=0.9)), "mse")
    return m


class StopAt(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if str(epoch) == os.environ.get("STAGES_STOP_AT") and context.distributed.rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)


teacher, student, baseline = model(12), model(4), model(4)
context.fit(teacher, x, y, batch_size=batch, epochs=2, validation_data=(xv, yv), verbose=0,
            stage="teacher")
soft = context.predict(teacher, x, verbose=0)
context.fit(student, x, soft, batch_size=batch, epochs=4, validation_data=(xv, yv), verbose=0,
            callbacks=[StopAt()], stage="student")
context.fit(baseline, x, y, batch_size=batch, epochs=2, validation_data=(xv, yv), verbose=0,
            stage="baseline")
if context.distributed.rank == 0 and os.environ.get("STAGES_WEIGHTS_OUT"):
    np.savez(os.environ["STAGES_WEIGHTS_OUT"],
             **{f"{name}{i}": w for name, m in
                (("teacher", teacher), ("student", student), ("baseline", baseline))
                for i, w in enumerate(m.get_weights())})
