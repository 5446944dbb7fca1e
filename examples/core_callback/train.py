"""Determined's Keras user guide script (DeterminedCallback with a plain model.fit), on det_sdk.

Adapted only in imports (``det_sdk`` for ``determined``) and in where data comes
from: the config's ``data.mnist_npz`` (or ``MNIST_NPZ``) names a local .npz
(``scripts/make_mnist_npz.py`` writes a small one), else Keras downloads MNIST;
and off the cluster ``core_context.info`` is the local run's stand-in for
``det.get_cluster_info()`` (which is None there), so the same file runs locally::

    python examples/core_callback/train.py                     # local run in ./det-runs
    det experiment create examples/core_callback/const.yaml examples/core_callback/

On the cluster the entrypoint runs it under the TensorFlow launcher.
"""

import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

import det_sdk as det


def load_data(core_context):
    path = (core_context.info.config.get("data") or {}).get("mnist_npz") \
        or os.environ.get("MNIST_NPZ")
    if path:
        with np.load(path) as f:
            (x_train, y_train), (x_test, y_test) = (f["x_train"], f["y_train"]), \
                (f["x_test"], f["y_test"])
    else:
        (x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()
    x_train = (x_train.astype("float32") / 255)[..., None]
    x_test = (x_test.astype("float32") / 255)[..., None]
    return (x_train, keras.utils.to_categorical(y_train, 10)), \
        (x_test, keras.utils.to_categorical(y_test, 10))


def my_build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dropout(hparams["dropout"]),
        keras.layers.Dense(10, activation="softmax"),
    ])


def main(core_context, strategy):
    info = core_context.info  # det.get_cluster_info() on the cluster
    assert info and info.task_type == "TRIAL", "this example only runs as a trial"
    hparams = info.trial.hparams

    with strategy.scope():
        model = my_build_model(hparams)
        model.compile(loss="categorical_crossentropy",
                      optimizer=keras.optimizers.SGD(hparams["learning_rate"]),
                      metrics=["accuracy"])

    det_cb = det.keras.DeterminedCallback(
        core_context,
        checkpoint=info.latest_checkpoint,
        continue_id=info.trial.trial_id,
    )
    tb_cb = det.keras.TensorBoard(core_context, update_freq="epoch")

    (x_train, y_train), (x_test, y_test) = load_data(core_context)
    model.fit(
        x_train, y_train,
        batch_size=hparams["global_batch_size"],
        epochs=int(os.environ.get("EPOCHS", hparams.get("epochs", 2))),
        validation_data=(x_test, y_test),
        shuffle=hparams.get("shuffle", True),
        verbose=2,
        callbacks=[det_cb, tb_cb],
    )


if __name__ == "__main__":
    tf.keras.utils.set_random_seed(1)  # the same start in every process and run
    distributed, strategy = det.core.DistributedContext.from_tf_config()
    # off the cluster the hparams come from this config (DET_CONFIG names another)
    local_config = os.environ.get("DET_CONFIG") or os.path.join(os.path.dirname(__file__),
                                                                "const.yaml")
    with det.core.init(distributed=distributed, config=local_config) as core_context:
        main(core_context, strategy)
