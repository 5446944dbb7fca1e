"""Seed 003's DeterminedCallback script, small: a plain ``model.compile`` + ``model.fit``
with ``DeterminedCallback``, written for a ``strategy.scope()``; numpy data made here.

Runs as one process (``python core_callback_n.py``), under the launcher and
``horovodrun -np N --gloo`` (Keras 3: det_sdk averages, broadcasts and splits batches),
and as a trial (``slots_per_trial: N``). Each process saves its final weights to
``<out>/rank<R>.npz`` (``out``: the config's ``data.out`` or ``CB_OUT``).

``CB_MWMS=1``: the script makes ``tf.distribute.MultiWorkerMirroredStrategy()`` itself
(after ``from_tf_config``, as scripts written for it do). ``CB_CASE``: ``uneven``
(a batch of 33 rows), ``rank_data`` (each process's data differs): both must be refused;
``dataset``: a shuffled ``tf.data`` dataset of unknown cardinality (trains). Several,
comma-separated, fit in turn (a new model each) in one run: a ``BatchSplitError`` of any
but the last is printed (``refused: ...``) and the next fits, so one run checks them all.
"""

import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

import det_sdk as det
from det_sdk.keras._determined_callback import BatchSplitError


def load_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8,)) > 0).astype("float32")[:, None]
    return (x[:192], y[:192]), (x[192:], y[192:])


def main(core_context, strategy, case=""):
    info = core_context.info
    hparams = info.trial.hparams
    with strategy.scope():
        model = keras.Sequential([
            keras.Input(shape=(8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ])
        model.compile(loss="binary_crossentropy",
                      optimizer=keras.optimizers.SGD(hparams["learning_rate"], momentum=0.9),
                      metrics=["accuracy"])
    det_cb = det.keras.DeterminedCallback(
        core_context, checkpoint=info.latest_checkpoint, continue_id=info.trial.trial_id)
    (x, y), (xv, yv) = load_data()
    if case == "rank_data":
        x = x + core_context.distributed.rank
    fit_data = {"x": x, "y": y,
                "batch_size": 33 if case == "uneven" else hparams["global_batch_size"]}
    if case == "dataset":  # shuffled by the global seed, of unknown cardinality
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(192)
        fit_data = {"x": ds.filter(lambda a, b: True).batch(hparams["global_batch_size"])}
    model.fit(
        **fit_data,
        epochs=hparams["epochs"],
        validation_data=(xv, yv),
        shuffle=hparams.get("shuffle", True),
        verbose=2,
        callbacks=[det_cb],
    )
    out = os.environ.get("CB_OUT") or (info.config.get("data") or {}).get("out")
    if out:
        np.savez(os.path.join(out, f"rank{core_context.distributed.rank}.npz"),
                 *model.get_weights())


if __name__ == "__main__":
    tf.keras.utils.set_random_seed(1)  # the same start and data order in every process and run
    distributed, strategy = det.core.DistributedContext.from_tf_config()
    if os.environ.get("CB_MWMS") == "1":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with det.core.init(distributed=distributed, config=os.environ.get("DET_CONFIG")) \
            as core_context:
        *first, last = os.environ.get("CB_CASE", "").split(",")
        for case in first:
            try:
                main(core_context, strategy, case)
            except BatchSplitError as err:
                print(f"refused: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        main(core_context, strategy, last)
