"""Issue 10's cases: what trains on one process trains the same on N (tests/e2e/test_same_on_n.py).

Run under `horovodrun -np 2` and as one process (the reference); rank 0 writes a
JSON report to $SAME_OUT. Each case is one section; the report's keys name it.
Files the callbacks write go under $SAME_DIR. With ``SAME_REFERENCE=1`` (the one-process
reference run) the sections only the 2-process run's report is read for are skipped: each
section the reference is read for starts from the same random seed in both runs (a
TensorFlow process costs its CPU in the sections, not only at import).
"""

import json
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

import det_sdk as det
from det_sdk.keras import _compat

keras = tf.keras
tf.config.experimental.enable_op_determinism()
context = det.keras.init(seed=11, checkpoint_period=False)
dist = context.distributed
out_dir = Path(os.environ["SAME_DIR"])
report: dict = {"size": dist.size, "rank_trial_ids": dist.allgather(context.trial_id)}

N = 33  # shards of 16 and 17 rows: 4 and 5 batches of 4 (uneven)
rng = np.random.default_rng(0)
ids = np.arange(N, dtype="float32")[:, None] / 1000  # column 0: the sample id
x = np.concatenate([ids, rng.normal(size=(N, 3)).astype("float32")], axis=1)
y = (x[:, 1:2] + 0.3 * x[:, 2:3] > 0).astype("float32")


class Recording(keras.Model):
    """Remembers the ids of the samples it trained on (eagerly): with weight > 0, in a
    step whose gradients count (numpy batches carry no weights det_sdk adds: a padding
    step zeroes this process's gradients instead, issue 28)."""

    def train_step(self, data):
        xb, _, wb = keras.utils.unpack_x_y_sample_weight(data)
        keep = np.ones(len(xb), bool) if wb is None else wb.numpy() > 0
        keep &= float(_compat.gradient_share().numpy()) > 0
        self.seen.extend(round(float(i) * 1000) for i in xb.numpy()[keep, 0])
        return super().train_step(data)


def make_model(record=False, metrics=("accuracy",), lr=0.1):
    inp = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inp)
    out = keras.layers.Dense(1, activation="sigmoid")(hidden)
    model = (Recording if record else keras.Model)(inp, out)
    model.seen = []
    model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(lr)),
                  loss="binary_crossentropy", metrics=list(metrics), run_eagerly=record)
    return model


def seen_everywhere(model):
    return sorted(i for part in dist.allgather(list(model.seen)) for i in part)


def checksums(model):
    return dist.allgather(float(sum(np.abs(w).sum() * (i + 1)
                                    for i, w in enumerate(model.get_weights()))))


bs = 4 if dist.size == 2 else 8  # a global batch of 8 either way
xs, ys = context.wrap_data(x, y)
# the one-process reference's report is read for sections 5, 6 and 9-11 only
reference_only = os.environ.get("SAME_REFERENCE") == "1"


def start_compared(seed):
    """Both runs start a compared section from one seed: the reference skips sections
    the 2-process run draws weights (and shuffles) in before it."""
    keras.utils.set_random_seed(seed)


if not reference_only:  # sections 1-4: the 2-process run's checks
    # 1. Arrays derived from wrap_data's views (arithmetic, slicing, a new axis and back).
    model = make_model(record=True)
    derived = (xs[:, :] * 2.0)[..., None][..., 0] / 2.0
    context.fit(model, x=derived, y=ys, batch_size=bs, epochs=1,
                validation_data=(x, y), verbose=0)
    report["derived_seen"] = seen_everywhere(model)
    report["derived_checksums"] = checksums(model)

    # 2. A dataset shuffled (seeded, and unseeded) before wrap_data: disjoint shards, 2 epochs.
    for name, seed in (("shuffled_seeded", 1337), ("shuffled_unseeded", None)):
        model = make_model(record=True)
        ds = tf.data.Dataset.from_tensor_slices((x[:32], y[:32])).shuffle(32, seed=seed)
        context.fit(model, x=context.wrap_data(ds).batch(bs), epochs=2,
                    validation_data=(x, y), verbose=0)
        report[f"{name}_seen"] = seen_everywhere(model)

    # 3. A wrapped dataset with uneven batch counts (9 batches: 5 and 4), with and without
    #    steps_per_epoch (which used to hang: rank 1 ran out of data).
    for name, extra in (("uneven", {}), ("uneven_steps", {"steps_per_epoch": 5})):
        model = make_model(record=True)
        batched = context.wrap_data(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
        context.fit(model, x=batched, epochs=1, validation_data=(x, y), verbose=0, **extra)
        report[f"{name}_seen"] = seen_everywhere(model)
        report[f"{name}_checksums"] = checksums(model)

    # 4. evaluate on a Dataset and on a Sequence (wrapped and whole), as one process on all.
    class Batches(keras.utils.Sequence):
        def __len__(self):
            return (N + 7) // 8

        def __getitem__(self, i):
            return x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]


    model = make_model(metrics=("accuracy", keras.metrics.AUC(name="auc")))
    context.fit(model, x=xs, y=ys, batch_size=bs, epochs=1, validation_data=(x, y), verbose=0)
    ds_eval = tf.data.Dataset.from_tensor_slices((x, y)).batch(5)
    report["evaluate_reference"] = model.evaluate(x, y, batch_size=5, verbose=0)
    report["evaluate_dataset"] = context.evaluate(model, context.wrap_data(ds_eval), verbose=0)
    report["evaluate_sequence"] = context.evaluate(model, context.wrap_data(Batches()), verbose=0)
    report["evaluate_whole_sequence"] = context.evaluate(model, Batches(), verbose=0)

start_compared(5)

# 5. class_weight with numpy input (the pipeline's own sample weights carry it). 32 rows:
#    every global batch splits evenly, so 2 processes make 1 process's updates.
model = make_model()
x32, y32 = context.wrap_data(x[:32], y[:32])
hist = context.fit(model, x=x32, y=y32, batch_size=bs, epochs=3,
                   class_weight={0: 1.0, 1: 3.0}, validation_data=(x, y), verbose=0)
report["class_weight_loss"] = hist.history["loss"]
report["class_weight_checksums"] = checksums(model)

# 6. Metrics from the summed state: counts add up to the data, AUC/precision are the
#    whole data's (the last epoch's validation used the final weights).
counts = ("tp", "fp", "tn", "fn")
model = make_model(metrics=[keras.metrics.TruePositives(name="tp"),
                            keras.metrics.FalsePositives(name="fp"),
                            keras.metrics.TrueNegatives(name="tn"),
                            keras.metrics.FalseNegatives(name="fn"),
                            keras.metrics.AUC(name="auc"),
                            keras.metrics.Precision(name="precision")])
x_val = rng.normal(size=(25, 4)).astype("float32")
y_val = (x_val[:, 1:2] > 0).astype("float32")
hist = context.fit(model, x=xs, y=ys, batch_size=bs, epochs=2,
                   validation_data=(x_val, y_val), verbose=0)
report["train_count_sums"] = [sum(hist.history[k][e] for k in counts) for e in range(2)]
report["val_count_sums"] = [sum(hist.history[f"val_{k}"][e] for k in counts) for e in range(2)]
final = dict(zip(["loss", *counts, "auc", "precision"],
                 model.evaluate(x_val, y_val, verbose=0)))
report["val_last"] = {k: hist.history[f"val_{k}"][-1] for k in ("auc", "precision", "tp")}
report["val_reference"] = {k: final[k] for k in ("auc", "precision", "tp")}
report["evaluate_metrics"] = context.evaluate(model, x_val, y_val, verbose=0, return_dict=True)
report["evaluate_metrics_reference"] = final

if not reference_only:  # sections 7 and 8: the 2-process run's checks
    # 7. Lookup and Normalization layers adapted differently on each process: fit broadcasts
    #    rank 0's tables; checkpoints hold them (saved here, loaded back below).
    words = np.array([["apple"], ["pear"], ["fig"], ["kiwi"], ["plum"], ["lime"]], dtype=object)
    mine = words[dist.rank::dist.size] if dist.size > 1 else words[::2]
    lookup = keras.layers.StringLookup()
    lookup.adapt(mine)
    norm = keras.layers.Normalization()
    norm.adapt(rng.normal(loc=dist.rank * 5.0, size=(20, 1)).astype("float32"))
    text_in = keras.Input((1,), dtype="string")
    num_in = keras.Input((1,))
    emb = keras.layers.Flatten()(keras.layers.Embedding(10, 2)(lookup(text_in)))
    joined = keras.layers.Concatenate()([emb, norm(num_in)])
    lmodel = keras.Model([text_in, num_in], keras.layers.Dense(1, activation="sigmoid")(joined))
    lmodel.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.1)),
                   loss="binary_crossentropy")
    wx = [np.repeat(words, 4, axis=0), rng.normal(size=(24, 1)).astype("float32")]
    wy = (rng.random(size=(24, 1)) > 0.5).astype("float32")
    (lx0, lx1), ly = context.wrap_data(wx, wy)
    # Keras 3 takes no numpy strings: validate on a dataset, predict by calling the model.
    w_val = context.wrap_data(tf.data.Dataset.from_tensor_slices((tuple(wx), wy)).batch(4))
    w_in = [tf.constant(wx[0].astype(str)), tf.constant(wx[1])]
    context.fit(lmodel, x=[lx0, lx1], y=ly, batch_size=bs, epochs=1, validation_data=w_val,
                verbose=0)
    report["lookup_vocabularies"] = dist.allgather([str(t) for t in lookup.get_vocabulary()])
    report["lookup_predictions"] = dist.allgather(lmodel(w_in).numpy().ravel().tolist())
    saver = det.keras.init(seed=11)  # a run with checkpoints, same processes
    saver.fit(lmodel, x=[lx0, lx1], y=ly, batch_size=bs, epochs=1, validation_data=w_val,
              verbose=0)
    if dist.is_chief:  # rank 0 wrote the checkpoint: it loads it
        loaded = saver.load_checkpoint_model(trial_id=saver.trial_id)
        report["lookup_loaded_equal"] = bool(np.allclose(
            loaded(w_in).numpy(), lmodel(w_in).numpy(), atol=1e-6))
        report["lookup_loaded_vocabulary"] = [
            str(t) for layer in loaded.layers if isinstance(layer, keras.layers.StringLookup)
            for t in layer.get_vocabulary()]


    # 8. Callbacks that write files run on rank 0 only; the others everywhere.
    class MarkingLogger(keras.callbacks.CSVLogger):
        def on_train_begin(self, logs=None):
            with open(out_dir / "csv_ranks.txt", "a") as f:
                f.write(f"{dist.rank}\n")
            super().on_train_begin(logs)


    class Marking(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            with open(out_dir / "plain_ranks.txt", "a") as f:
                f.write(f"{dist.rank}\n")


    model = make_model()
    context.fit(model, x=xs, y=ys, batch_size=bs, epochs=1, validation_data=(x, y), verbose=0,
                callbacks=[MarkingLogger(str(out_dir / "log.csv")), Marking(),
                           keras.callbacks.EarlyStopping(patience=1)])
    dist.barrier()
    report["csv_ranks"] = sorted((out_dir / "csv_ranks.txt").read_text().split())
    report["plain_ranks"] = sorted((out_dir / "plain_ranks.txt").read_text().split())

start_compared(9)

# 9. Issue 49: data means on N processes what it means on one.
#    a) validation rows cut from wrap_data's views (each process would cut its own part):
#       trains on one process, refused on several, naming the fix.
def refused(fn):
    try:
        fn()
    except det.errors.UsageError as err:
        return str(err)
    return None


report["cut_validation_refused"] = refused(lambda: context.fit(
    make_model(), x=xs, y=ys, batch_size=bs, epochs=1, validation_data=(xs[:16], ys[:16]),
    verbose=0))
#    b) an unwrapped dataset shuffled alike everywhere (init() seeds TensorFlow alike):
#       every process would train the same batches, refused.
alike = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(33).batch(bs)
report["unwrapped_dataset_refused"] = refused(lambda: context.fit(
    make_model(), x=alike, steps_per_epoch=2, epochs=1, verbose=0))
#    c) Normalization adapted on wrapped data (and on arrays derived from it): over all
#       the rows, as on one process; a model using it trains to one process's loss.
norm = keras.layers.Normalization()
norm.adapt(xs)
scaled = keras.layers.Normalization()
scaled.adapt(xs / 2.0)
report["adapted"] = dist.allgather(
    [np.asarray(w).ravel().tolist() for w in (*norm.get_weights(), *scaled.get_weights())])
inp = keras.Input((4,))
nmodel = keras.Model(inp, keras.layers.Dense(1, activation="sigmoid")(norm(inp)))
nmodel.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.1)),
               loss="binary_crossentropy")
x32, y32 = context.wrap_data(x[:32], y[:32])
hist = context.fit(nmodel, x=x32, y=y32, batch_size=bs, epochs=2, validation_data=(x, y),
                   verbose=0)
report["adapted_val_loss"] = hist.history["val_loss"]

#    c') Discretization and Normalization adapted before wrap_data on a dataset the script
#       batched by shard_batch_size (keras-io's FeatureSpace port): adapt reads the global
#       batches one process reads (the quantile sketch and merged moments depend on them)
many = np.random.default_rng(3).gamma(2.0, 10.0, size=(400, 1)).astype("float32")
batched = tf.data.Dataset.from_tensor_slices(many).batch(dist.shard_batch_size(32))
bins = keras.layers.Discretization(num_bins=5, epsilon=0.01)
bins.adapt(batched)
moments = keras.layers.Normalization()
moments.adapt(batched)
report["adapted_batched"] = dist.allgather(
    [[float(b) for b in bins.bin_boundaries],
     *(np.asarray(w).ravel().tolist() for w in moments.get_weights())])

#    d) plain arrays alike on every process, not passed through wrap_data (a one-process
#       script run on N): shared out as wrap_data would, each sample trained once an epoch
#       (32 rows: every global batch splits evenly, so the weights are one process's too)
plain = make_model(record=True)
context.fit(plain, x=x[:32], y=y[:32], batch_size=bs, epochs=1, verbose=0)
report["plain_arrays_seen"] = seen_everywhere(plain)
report["plain_arrays_weights"] = [np.asarray(w).ravel().tolist() for w in plain.get_weights()]

# 10. Issue 49 (keras-io's TokenAndPositionEmbedding): an Embedding looked up with
#     arange(length) and broadcast over the batch gives each process one sparse row per
#     position; Adam squares rows without adding up duplicate indices (Keras 3), so the
#     processes' rows must be summed back per position, as one process has them. Token
#     ids (different per process) stay one row per lookup, as on one process.
class TokensAndPositions(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tokens = keras.layers.Embedding(20, 4)
        self.positions = keras.layers.Embedding(6, 4)

    def call(self, ids):
        return self.tokens(ids) + self.positions(tf.range(6))


tokens = np.random.default_rng(3).integers(0, 20, size=(32, 6)).astype("int32")
pos_in = keras.Input((6,), dtype="int32")
pos_out = keras.layers.Dense(1, activation="sigmoid")(
    keras.layers.GlobalAveragePooling1D()(TokensAndPositions()(pos_in)))
pmodel = keras.Model(pos_in, pos_out)
pmodel.compile(optimizer=context.wrap_optimizer(keras.optimizers.Adam(0.05)),
               loss="binary_crossentropy")
tx, ty = context.wrap_data(tokens, y[:32])
context.fit(pmodel, x=tx, y=ty, batch_size=bs, epochs=2, verbose=0)
report["positions_weights"] = [np.asarray(w).ravel().tolist() for w in pmodel.get_weights()]

# 11. Issue 56 (keras-io's FeatureSpace port, 242 rows in batches of 16 per process): a
#     dataset batched by shard_batch_size, then wrapped, whose last global batch splits
#     unevenly: 30 rows in batches of 4 are 8 batches, the last global step 4 rows on one
#     process and 2 on the other (one process: 6 rows). Each process's gradients are
#     weighted by its rows, as one process weighs the 6 (before: the 2 as much as the 4).
keras.utils.set_random_seed(3)
u_in = keras.Input((4,))
umodel = keras.Model(u_in, keras.layers.Dense(1, activation="sigmoid")(
    keras.layers.Dense(8, activation="relu")(u_in)))
umodel.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.5)),
               loss="binary_crossentropy")
uneven_ds = tf.data.Dataset.from_tensor_slices((x[:30], y[:30])).batch(dist.shard_batch_size(8))
context.fit(umodel, x=context.wrap_data(uneven_ds), epochs=3, verbose=0)
report["uneven_last_batch_weights"] = [np.asarray(w).ravel().tolist()
                                       for w in umodel.get_weights()]

if dist.is_chief:
    with open(os.environ["SAME_OUT"], "w") as f:
        json.dump(report, f, indent=1, default=float)
