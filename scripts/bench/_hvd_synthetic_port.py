"""det_sdk's port of Horovod's Keras synthetic benchmark (scripts/bench/hvd_synthetic.py runs it).

Horovod's ``examples/tensorflow2/tensorflow2_keras_synthetic_benchmark.py`` ported with
docs/migrating.md's table: ``hvd.init()`` -> ``det.keras.init()``,
``hvd.DistributedOptimizer(opt, compression=...)`` -> ``context.wrap_optimizer(opt,
compression=...)``, ``BroadcastGlobalVariablesCallback`` and ``MetricAverageCallback``
dropped, ``model.fit`` -> ``context.fit``; the model, the data (each process's own
random batch, cached and repeated), the timing callback and its printout are the
original's. ``--image-size`` is the benchmark driver's, as it is for the original it
runs (224 is too large for a 2-core CPU); ``--checkpoints off`` is
``det.keras.init(checkpoint_period=False)``, to account for the per-epoch checkpoints
det_sdk writes by default.
"""

from __future__ import annotations

import argparse
from timeit import default_timer as timer

import numpy as np
import tensorflow as tf

import det_sdk as det

parser = argparse.ArgumentParser()
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--model", default="ResNet50")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--image-size", type=int, default=224)
parser.add_argument("--num-batches-per-iter", type=int, default=10)
parser.add_argument("--num-iters", type=int, default=10)
parser.add_argument("--checkpoints", choices=("default", "off"), default="default")
args = parser.parse_args()

context = (det.keras.init(checkpoint_period=False) if args.checkpoints == "off"
           else det.keras.init())
keras = tf.keras
size = args.image_size
model = getattr(keras.applications, args.model)(weights=None, input_shape=(size, size, 3))
compression = "fp16" if args.fp16_allreduce else None
opt = context.wrap_optimizer(keras.optimizers.SGD(0.01), compression=compression)

# init() seeds TensorFlow alike on every process, so unseeded draws would be the same
# batch everywhere (refused by context.fit: N processes training one's data); an op
# seed per rank gives each its own, as the original's unseeded processes have
seed = context.distributed.rank
data = tf.random.uniform([args.batch_size, size, size, 3], seed=seed)
target = tf.random.uniform([args.batch_size, 1], minval=0, maxval=999, dtype=tf.int64,
                           seed=seed)
dataset = tf.data.Dataset.from_tensor_slices((data, target)).cache().repeat().batch(
    args.batch_size)
model.compile(loss=keras.losses.SparseCategoricalCrossentropy(), optimizer=opt)


class TimingCallback(tf.keras.callbacks.Callback):
    """The original's: images/s of each epoch after the first, printed at the end."""

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.img_secs: list[float] = []

    def on_train_end(self, logs: dict | None = None) -> None:
        mean, conf = np.mean(self.img_secs), 1.96 * np.std(self.img_secs)
        n = context.distributed.size
        print(f"Img/sec per CPU: {mean:.1f} +-{conf:.1f}")
        print(f"Total img/sec on {n} CPU(s): {n * mean:.1f} +-{n * conf:.1f}")

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.starttime = timer()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        img_sec = args.batch_size * args.num_batches_per_iter / (timer() - self.starttime)
        print(f"Iter #{epoch}: {img_sec:.1f} img/sec per CPU")
        if epoch > 0:  # the warm-up epoch is skipped, as in the original
            self.img_secs.append(img_sec)


callbacks = [TimingCallback()] if context.distributed.rank == 0 else []
context.fit(model, dataset, steps_per_epoch=args.num_batches_per_iter, epochs=args.num_iters,
            callbacks=callbacks, verbose=0)
