"""Load the latest checkpoint of each run in ``LOAD_TRIALS`` (comma-separated run ids, default
1) with ``context.load_checkpoint_model`` on whatever backend this process runs
(``KERAS_BACKEND``) and write its predictions to ``OUT``_<id>.npy. Several runs in one process:
each load test's process costs a framework's start-up."""

import os

import numpy as np

import det_sdk as det

context = det.keras.init(config={"name": "load"}, hparams={})
x = np.random.default_rng(0).normal(size=(200, 8)).astype("float32")[:8]
for trial_id in os.environ.get("LOAD_TRIALS", "1").split(","):
    model = context.load_checkpoint_model(trial_id=int(trial_id))
    np.save(f"{os.environ['OUT']}_{trial_id}.npy", np.asarray(model.predict(x, verbose=0)))
