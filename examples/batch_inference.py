# batch_inference.py
# The proposal's batch inference example, made runnable: `det job run
# batch_inference.yaml .` on the cluster (under Horovod when resources.slots > 1),
# or `python batch_inference.py` on a laptop against a local run.

import os
from pathlib import Path

import numpy as np
from tensorflow import keras

import det_sdk as det

# Off the cluster, config_data comes from batch_inference.yaml beside this script.
context = det.keras.init(config=Path(__file__).with_name("batch_inference.yaml"))

# you can access values from your config's .data field
# which is just a dictionary of arbitrary user data
trial_id = context.config_data["trial_id"]

# load a model you trained in Determined (locally: the run with that id)
model = context.load_checkpoint_model(trial_id=trial_id)

# the rows to predict: MNIST's test images (or the same from an .npz, offline)
mnist_npz = context.config_data.get("mnist_npz") or os.environ.get("MNIST_NPZ")
if mnist_npz:
    with np.load(mnist_npz) as f:
        data = f["x_test"]
else:
    (_, _), (data, _) = keras.datasets.mnist.load_data()
data = np.expand_dims(data.astype("float32") / 255, -1)
data = context.wrap_data(data)

# You are still free to shard your batch_size but since we are not training
# there isn't any particular need to.
batch_size = context.config_data["batch_size"]

# simple wrapper around model.predict(): every process predicts its shard, and
# the rows come back in their original order
predictions = context.predict(model, data, batch_size=batch_size, verbose=0)

# you'll want to upload your predictions to somewhere persistent. A relative path lands
# in the job's working directory: on the cluster the master keeps the files a job writes
# there when it ends (`det job download JOB_ID DIR` fetches them)
if context.distributed.is_chief:
    out = context.config_data.get("predictions_path", "predictions.npy")
    np.save(out, predictions)
    print(f"wrote {len(predictions)} predictions to {out}")
