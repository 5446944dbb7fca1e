"""A streamed ``context.predict(..., output=)``, run by tests/e2e/test_predict_stream.py.

Alone or under ``horovodrun``. Environment: ``PRED_OUT`` (the output directory),
``PRED_KIND`` (arrays | wrapped | derived | sequence | dataset | multi; several, comma
separated: each into ``PRED_OUT/<kind>``), ``PRED_ROWS``,
``PRED_BATCH``, ``PRED_SLEEP`` (seconds per batch: time for a test to kill the process
while it predicts), ``PRED_HOLD_AT`` (once that many parts are in the output directory or predicted,
the process waits to be killed before its next batch: a kill lands mid-run however late
the test sees the parts, under any load), ``PRED_FAIL_AT`` (``rank:fetch``: that
process's input raises at its that-many-th batch fetched, a Sequence only). The
model's weights are drawn from a fixed seed, so every run (and every process) predicts
the same values.
"""

import glob
import os
import time

import numpy as np
import tensorflow as tf

import det_sdk as det

context = det.keras.init()
kind = os.environ.get("PRED_KIND", "arrays")
rows = int(os.environ.get("PRED_ROWS", "1000"))
batch = int(os.environ.get("PRED_BATCH", "16"))
sleep = float(os.environ.get("PRED_SLEEP", "0"))
hold_at = int(os.environ.get("PRED_HOLD_AT", "0"))

rng = np.random.default_rng(0)
x = rng.normal(size=(rows, 4)).astype("float32")
x[:, 0] = np.arange(rows) / 1000  # the row's id, recoverable from the predictions

inp = tf.keras.Input((4,))


def make_model(multi: bool, out_dir: str):
    gated = gate(inp, out_dir) if sleep or hold_at else inp
    hidden = tf.keras.layers.Dense(8, activation="tanh")(gated)
    ids = tf.keras.layers.Lambda(lambda t: t[:, :1] * 1000)(inp)
    if multi:
        return tf.keras.Model(inp, {"score": tf.keras.layers.Dense(1)(hidden), "ids": ids})
    scores = tf.keras.layers.Dense(3)(hidden)
    return tf.keras.Model(inp, tf.keras.layers.Concatenate()([ids, scores]))


def gate(t, out_dir):
    """The input, unchanged, through a step that runs once per batch predicted, inside the
    model's predict function (Keras 2 predicts through it, not predict_on_batch): it
    sleeps PRED_SLEEP, and holds once PRED_HOLD_AT parts exist or have been predicted.
    Parts are written behind the predictions (a writer thread), so under load the files
    lag: a hold on the files alone let a run predict to its end before its 48th file
    appeared (killed at 60 of 60). Counted for every process, the parts predicted reach
    the mark first; the files then reach it too, and never the run's end."""
    def parts():
        return len(glob.glob(os.path.join(out_dir, "part-*.json")))

    predicted = [parts()]  # a resumed run starts after the parts already there

    def step(a):
        time.sleep(sleep)
        while hold_at and max(parts(), predicted[0]) >= hold_at:
            time.sleep(1)  # held here until the test kills the process
        predicted[0] += context.distributed.size
        return a

    def through(x):
        y = tf.numpy_function(step, [x], tf.float32)
        y.set_shape(x.shape)
        return y

    return tf.keras.layers.Lambda(through)(t)


class Batches(tf.keras.utils.Sequence):
    def __len__(self):
        return -(-rows // batch)

    fetched = 0

    def __getitem__(self, i):
        Batches.fetched += 1
        rank, at = map(int, os.environ.get("PRED_FAIL_AT", "-1:0").split(":"))
        if rank == context.distributed.rank and Batches.fetched == at:
            raise RuntimeError(f"the input broke at batch {i} on process {rank}")
        return x[i * batch:(i + 1) * batch]


def data_of(kind):
    if kind == "sequence":
        return Batches()
    if kind == "dataset":
        return context.wrap_data(tf.data.Dataset.from_tensor_slices(x).batch(batch))
    if kind == "wrapped":
        return context.wrap_data(x)
    if kind == "derived":  # each process's own rows (arithmetic on wrapped views)
        return context.wrap_data(x) * 1
    return x


kinds = kind.split(",")
for k in kinds:
    out_dir = os.environ["PRED_OUT"] if len(kinds) == 1 else os.path.join(os.environ["PRED_OUT"], k)
    model = make_model(k == "multi", out_dir)
    w = np.random.default_rng(1)
    model.set_weights([w.normal(size=v.shape).astype("float32") for v in model.get_weights()])
    out = context.predict(model, data_of(k), output=out_dir, batch_size=batch)
    print("RESULT", out.rows, out.parts, out.resumed, flush=True)
context.close()
