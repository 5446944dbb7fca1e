"""The seed tutorial's TFKerasTrial (TensorFlow Keras MNIST Tutorial), on det_sdk.

Changed from the tutorial: the imports name det_sdk instead of determined, and the
data can come from a local .npz (``data: {mnist_npz: /path/x.npz}`` in the config, or
``MNIST_NPZ``; ``scripts/make_mnist_npz.py`` writes one), because machines without
internet cannot download MNIST. Without either, ``keras.datasets.mnist`` is used.

    python -m det_sdk.keras.trial model_def:MNISTTrial --config const.yaml   # locally
    det experiment create const.yaml .                                        # cluster
"""

import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

import det_sdk as det
from det_sdk.keras import InMemorySequence, TFKerasTrial


def load_mnist(context):
    path = context.get_data_config().get("mnist_npz") or os.environ.get("MNIST_NPZ")
    if path:
        with np.load(path) as f:
            return (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])
    return keras.datasets.mnist.load_data()


class MNISTTrial(TFKerasTrial):
    def __init__(self, context: det.keras.TFKerasTrialContext):
        # required: store TFKerasTrialContext for later use
        self.context = context

    def build_model(self):
        model = keras.Sequential(
            [
                keras.layers.Flatten(input_shape=(28, 28)),
                keras.layers.Dense(128, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model = self.context.wrap_model(model)
        model.compile(
            optimizer="adam",
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        )
        return model

    def build_training_data_loader(self):
        (train_images, train_labels), (_, _) = load_mnist(self.context)

        global_batch_size = self.context.get_hparam("global_batch_size")
        train = InMemorySequence(
            data=train_images, labels=train_labels, batch_size=global_batch_size
        )
        return train

    def build_validation_data_loader(self):
        (_, _), (test_images, test_labels) = load_mnist(self.context)

        batch_size = self.context.get_per_slot_batch_size()
        test = InMemorySequence(data=test_images, labels=test_labels, batch_size=batch_size)
        return test
