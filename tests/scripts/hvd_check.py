"""Checks of data-parallel training, run under `horovodrun -np 2` by tests/e2e/test_horovod.py.

Each process trains on its shard; rank 0 writes what it found to $HVD_OUT (JSON).
Also runs as one process, for the single-process reference values.
"""

import json
import os

import numpy as np
import tensorflow as tf

import det_sdk as det

context = det.keras.init(hparams={"global_batch_size": 8}, seed=5)
dist = context.distributed
batch_size = context.distributed.shard_batch_size(context.hparams["global_batch_size"])

N = 203  # not divisible by the number of processes nor by the batch size
rng = np.random.default_rng(0)
ids = np.arange(N, dtype="float32")[:, None] / 1000  # sample id, recoverable, small
x = np.concatenate([ids, rng.normal(size=(N, 3)).astype("float32")], axis=1)
y = (x[:, 1:2] > 0).astype("float32")


class Recording(tf.keras.Model):
    """A model that remembers the sample ids (column 0) it trained on, with weight > 0."""

    seen: list

    def train_step(self, data):
        xb, _, wb = tf.keras.utils.unpack_x_y_sample_weight(data)
        keep = np.ones(len(xb), bool) if wb is None else wb.numpy() > 0
        self.seen.extend(round(float(i) * 1000) for i in xb.numpy()[keep, 0])
        return super().train_step(data)


def make_model(record=False):
    inp = tf.keras.Input((4,))
    hidden = tf.keras.layers.Dense(8, activation="relu")(inp)
    out = tf.keras.layers.Dense(1, activation="sigmoid")(hidden)
    model = (Recording if record else tf.keras.Model)(inp, out)
    model.seen = []
    opt = context.wrap_optimizer(tf.keras.optimizers.SGD(0.1))
    model.compile(optimizer=opt, loss="binary_crossentropy", metrics=["accuracy"],
                  run_eagerly=record)
    return model


def checksum(model):
    return float(sum(np.abs(w).sum() * (i + 1) for i, w in enumerate(model.get_weights())))


class Batches(tf.keras.utils.Sequence):
    def __len__(self):
        return (N + 7) // 8

    def __getitem__(self, i):
        return x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]


report = {"size": dist.size}
xs, ys = context.wrap_data(x, y)
report["shard_rows"] = dist.allgather(len(xs))

# Every sample exactly once per epoch across processes, for each kind of input.
for kind in ("numpy", "sequence", "dataset"):
    model = make_model(record=True)
    if dist.rank:  # every rank draws the same initial weights (one seed): make rank 1's differ
        model.set_weights([w * 1.5 + 0.1 for w in model.get_weights()])
    report.setdefault("initial_checksums", dist.allgather(checksum(model)))
    if kind == "numpy":
        train = {"x": xs, "y": ys, "batch_size": batch_size}
    elif kind == "sequence":
        train = {"x": context.wrap_data(Batches())}
    else:
        ds = context.wrap_data(tf.data.Dataset.from_tensor_slices((x, y))).batch(batch_size)
        train = {"x": ds}
    context.fit(model, **train, epochs=1, validation_data=(x[:20], y[:20]), verbose=0)
    seen = [i for part in dist.allgather(list(model.seen)) for i in part]
    report[f"{kind}_seen_sorted_equals_all"] = sorted(seen) == list(range(N))
    report[f"{kind}_seen_count"] = len(seen)
    report[f"{kind}_final_checksums"] = dist.allgather(checksum(model))

# A Sequential without an input shape: fit builds it before broadcasting rank 0's state.
lazy = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"),
                            tf.keras.layers.Dense(1, activation="sigmoid")])
lazy.compile(optimizer=context.wrap_optimizer(tf.keras.optimizers.Adam(0.01)),
             loss="binary_crossentropy")
context.fit(lazy, x=xs, y=ys, batch_size=batch_size, epochs=1,
            validation_data=(x[:20], y[:20]), verbose=0)
report["lazy_final_checksums"] = dist.allgather(checksum(lazy))

# predict: the rows of the original data, in order, however they were passed.
full = model.predict(x, verbose=0)
report["predict_wrapped_equal"] = bool(np.allclose(context.predict(model, xs), full, atol=1e-6))
unwrapped = context.predict(model, x)
report["predict_unwrapped_rows"] = len(unwrapped)
report["predict_unwrapped_equal"] = bool(np.allclose(unwrapped, full, atol=1e-6))
chief_only = context.predict(model, xs, all_ranks=False)
report["predict_chief_only"] = dist.allgather(chief_only is None)
report["predict_sequence_equal"] = bool(np.allclose(
    context.predict(model, context.wrap_data(Batches())), full, atol=1e-6))
# neither wrapped nor numpy: each row once on every process (keras-io's one new sample as
# tensors; a whole dataset; N copies before)
one_sample = context.predict(model, tf.convert_to_tensor(x[:1]), verbose=0)
report["predict_tensor_rows"] = dist.allgather(len(one_sample))
report["predict_tensor_equal"] = bool(np.allclose(one_sample, full[:1], atol=1e-6))
whole = context.predict(model, tf.data.Dataset.from_tensor_slices(x).batch(7), verbose=0)
report["predict_dataset_rows"] = dist.allgather(len(whole))
report["predict_dataset_equal"] = bool(np.allclose(whole, full, atol=1e-6))

# evaluate: weighted by shard size, equal to one process on the whole data.
loss, acc = context.evaluate(model, xs, ys, verbose=0)
ref_loss, ref_acc = model.evaluate(x, y, verbose=0)
report["evaluate"] = [loss, acc]
report["evaluate_reference"] = [ref_loss, ref_acc]

# Horovod's fp16 compression (its synthetic benchmark's --fp16-allreduce): gradients sent as
# float16, the ranks still identical, the training close to the uncompressed one's
import horovod.tensorflow as hvd  # noqa: E402 - the script's own Horovod name, as ported

compressed, start = {}, make_model().get_weights()
for name, compression in (("none", None), ("fp16", hvd.Compression.fp16)):
    m = make_model()
    m.set_weights(start)  # both from the same weights
    m.compile(optimizer=context.wrap_optimizer(tf.keras.optimizers.SGD(0.1),
                                               compression=compression),
              loss="binary_crossentropy")
    context.fit(m, x=xs, y=ys, batch_size=batch_size, epochs=1, verbose=0)
    compressed[name] = [w.ravel() for w in m.get_weights()]
    report[f"compression_{name}_checksums"] = dist.allgather(checksum(m))
report["compression_fp16_gap"] = float(max(np.abs(a - b).max() for a, b in
                                           zip(compressed["none"], compressed["fp16"])))

# The gradients' weighted average (issue 56 item 9): from SKIP_WEIGHTING_FROM gradient
# values, processes whose rows are alike take Horovod's plain average, bit for bit, not
# the weighted formula's two passes (3 rows, not a power of two: ((3 g0 + 3 g1) / 2) / 3
# has other bits than (g0 + g1) / 2); rows that differ take the weighted one; a smaller
# step keeps the weighted one without asking. Each rank makes both ranks' gradients.
if dist.size == 2:
    from det_sdk.keras._horovod import SKIP_WEIGHTING_FROM

    @tf.function
    def averaged(weight, mine):  # in a step the gradients are the graph's tensors
        return dist.average_gradients([mine, None], weight=weight)

    half, three, five = np.float32(0.5), np.float32(3), np.float32(5)
    for size, name in ((SKIP_WEIGHTING_FROM, "large"), (64, "small")):
        g0, g1 = (np.random.default_rng(100 + r).normal(size=size).astype("float32")
                  for r in (0, 1))
        mine = tf.constant((g0, g1)[dist.rank])
        plain, weighted = (g0 + g1) * half, ((g0 * three + g1 * three) * half) / three
        alike = averaged(tf.constant(3.0), mine)
        report[f"average_{name}_weighted_bits_differ"] = bool(not np.array_equal(weighted, plain))
        report[f"average_{name}_alike_is_plain"] = bool(np.array_equal(alike[0].numpy(), plain))
        report[f"average_{name}_alike_is_weighted"] = bool(
            np.array_equal(alike[0].numpy(), weighted))
        report[f"average_{name}_none_stays"] = alike[1] is None
        uneven = averaged(tf.constant(3.0 if dist.rank == 0 else 5.0), mine)[0].numpy()
        report[f"average_{name}_uneven_is_weighted"] = bool(
            np.array_equal(uneven, ((g0 * three + g1 * five) * half) / np.float32(4)))

if dist.is_chief and os.environ.get("HVD_OUT"):
    with open(os.environ["HVD_OUT"], "w") as f:
        json.dump(report, f, indent=1)
