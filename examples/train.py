# train.py
# taken from the keras mnist example, with the New Keras API added (the proposal's
# example, runnable: `python train.py` on a laptop, `horovodrun -np 2 python train.py`,
# or `entrypoint_script: python3 train.py` on the cluster).

import os
from pathlib import Path

import numpy as np
from tensorflow import keras
from tensorflow.keras import layers

import det_sdk as det

# this step will also initialize random seeds automatically.
# Off the cluster, hyperparameters come from const.yaml beside this script (the
# `hparams=` values are defaults it may override); on the cluster, from the trial.
context = det.keras.init(
    config=Path(__file__).with_name("const.yaml"),
    hparams={"learning_rate": 0.01},
)

# get the hyperparameters for this trial
hparams = context.training.hparams

# model code is straight from keras mnist example
num_classes = 10
input_shape = (28, 28, 1)

# No network? Point MNIST_NPZ (or `data: {mnist_npz: ...}` in the config) at an
# .npz with x_train, y_train, x_test, y_test (scripts/make_mnist_npz.py writes one
# from real handwritten digits that scikit-learn ships).
mnist_npz = context.config_data.get("mnist_npz") or os.environ.get("MNIST_NPZ")
if mnist_npz:
    with np.load(mnist_npz) as f:
        x_train, y_train = f["x_train"], f["y_train"]
        x_test, y_test = f["x_test"], f["y_test"]
else:
    (x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()

x_train = x_train.astype("float32") / 255
x_test = x_test.astype("float32") / 255
x_train = np.expand_dims(x_train, -1)
x_test = np.expand_dims(x_test, -1)

y_train = keras.utils.to_categorical(y_train, num_classes)
y_test = keras.utils.to_categorical(y_test, num_classes)

# calling context.wrap_data() will ensure your data is sharded for distributed
# training, and it is basically a noop when you are on a single gpu
x_train, y_train = context.wrap_data(x_train, y_train)
x_test, y_test = context.wrap_data(x_test, y_test)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        # example: suppose you wanted to tune dropout as a hyperparameter:
        layers.Dropout(hparams["dropout"]),
        layers.Dense(num_classes, activation="softmax"),
    ]
)

model.summary()

# learning rate is commonly set as a hyperparameter
optimizer = keras.optimizers.SGD(hparams["learning_rate"])

# calling context.wrap_optimizer() does two things:
#   - ensures the optimizer state is saved in checkpoints
#   - with several processes, returns an optimizer of the same kind that
#     averages gradients across them (Horovod), wherever they are applied
optimizer = context.wrap_optimizer(optimizer)

model.compile(loss="categorical_crossentropy", optimizer=optimizer, metrics=["accuracy"])

# batch_size is a commonly set as a hyperparameter
global_batch_size = hparams["global_batch_size"]

# Optional for distributed training: calculate this worker's
# batch_size so that the effective batch_size across all workers
# remains constant.  If you choose not to use this, the
# effective batch_size will be multiplied by the number slots_per_trial.
batch_size = context.distributed.shard_batch_size(global_batch_size)

# Our keras support requires that you pass validation data into fit()
# rather than using separate fit() and evaluate() calls.
hist = context.fit(
    model,
    x=x_train,
    y=y_train,
    batch_size=batch_size,
    epochs=int(os.environ.get("EPOCHS", "3")),  # ignored/automatically set for cluster training
    validation_data=(x_test, y_test),
)

print("Test loss:", hist.history["val_loss"][-1])
print("Test accuracy:", hist.history["val_accuracy"][-1])
