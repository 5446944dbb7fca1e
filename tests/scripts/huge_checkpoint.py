"""A model whose checkpoint's state.bin is over 2 GiB: Embedding(HUGE_ROWS, 4) + SGD.

For tests/e2e/test_huge_checkpoint.py (issue 22: one read() stops at 2 GiB - 4 KiB on
Linux, so such a checkpoint could not be restored). 140,000,000 x 4 float32 is
2.24 GB. The first run starts the table at ones (a random initializer would hold two
more copies of it at once), trains a few sparse SGD steps on rows at both ends and
checkpoints at its end; a run with DET_RESUME starts from zeros (so only a restore
brings the weights back) and trains no further. Each writes the xxh3-64 of every
weight, read in place (no 2 GB copy), to HUGE_DIGEST_OUT (JSON).
"""

import json
import os

import numpy as np
import tensorflow as tf
import xxhash

import det_sdk as det
from det_sdk.keras._checkpoint import _host_array

rows = int(os.environ.get("HUGE_ROWS", "140000000"))
resume = bool(os.environ.get("DET_RESUME"))
context = det.keras.init(hparams={}, seed=3)
model = tf.keras.Sequential([
    tf.keras.Input((2,), dtype="int32"),
    tf.keras.layers.Embedding(rows, 4, embeddings_initializer="zeros" if resume else "ones"),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(1),
])
model.compile(optimizer=context.wrap_optimizer(tf.keras.optimizers.SGD(0.5)), loss="mse")
rng = np.random.default_rng(0)
# ids near both ends of the table: bytes past the first 2 GiB of state.bin change too
x = np.concatenate([rng.integers(0, 1000, (32, 1)), rng.integers(rows - 1000, rows, (32, 1))],
                   axis=1).astype("int32")
y = rng.normal(size=(32, 1)).astype("float32")
xs, ys = context.wrap_data(x, y)
context.fit(model, x=xs, y=ys, batch_size=8, epochs=1, validation_data=(x[:8], y[:8]),
            verbose=0)
digests = [xxhash.xxh3_64_hexdigest(np.ascontiguousarray(_host_array(tf.convert_to_tensor(v))))
           for v in model.weights]
with open(os.environ["HUGE_DIGEST_OUT"], "w") as f:
    json.dump({"digests": digests, "shapes": [list(v.shape) for v in model.weights],
               # rows past the first 2 GiB were trained: they are not the initial ones
               "tail_trained": bool(np.any(_host_array(tf.convert_to_tensor(
                   model.weights[0]))[rows - 1000:] != 1))}, f)
