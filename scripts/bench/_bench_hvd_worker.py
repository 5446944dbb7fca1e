"""Worker of the Horovod benchmarks: one process of one measured run.

Launched by scripts/bench/bench_horovod_fit.py and scripts/bench/bench_horovod_predict.py, not by
hand (though it can be, for profiling). Modes:

* ``det`` (under ``horovodrun``): the Keras MNIST convnet trained with
  ``det_sdk.keras.init`` + ``context.wrap_data`` + ``context.wrap_optimizer`` +
  ``context.fit`` (global batch 128 shared out by ``shard_batch_size``);
* ``plain`` (under ``horovodrun``): the same work hand-written with Horovod's plain
  TensorFlow ops (``hvd.init()``, contiguous half of the arrays per rank, an optimizer
  subclass that averages gradients in ``apply``/``apply_gradients`` with one grouped
  allreduce (det_sdk's own averaging), ``hvd.broadcast_variables`` before the first
  step, epoch metrics averaged by allreduce, batch 64 per rank; Horovod's Keras
  wrappers average nothing on Keras 3),
  with TensorFlow's thread pools sized ``cores // processes-per-host`` as ``det_sdk``'s
  ``init()`` sizes them (``--default-threads``: TensorFlow's defaults instead);
* ``predict-det`` (under ``horovodrun``): ``context.predict(model, context.wrap_data(x))``,
  also taken apart into the local ``model.predict`` and the gather;
* ``predict-single`` (plain ``python``): ``model.predict(x)`` in one process.

Fit modes train ``--epochs + 1`` epochs and time from the end of the first (warm-up,
tracing) epoch to the end of training with a callback on rank 0: the *training span*,
never the wall time of ``fit()``. Rank 0 prints one line ``BENCH {json}`` and writes the
JSON to ``--out`` when given.

Usage::

    horovodrun -np 2 --gloo .venv/bin/python scripts/bench/_bench_hvd_worker.py det \\
        --runs-dir /tmp/runs [--epochs 2] [--samples 8192] [--out result.json] [--profile]
    horovodrun -np 2 --gloo .venv/bin/python scripts/bench/_bench_hvd_worker.py plain
    horovodrun -np 2 --gloo .venv/bin/python scripts/bench/_bench_hvd_worker.py predict-det \\
        --runs-dir /tmp/runs [--rows 20000] [--reference single.npy]
    .venv/bin/python scripts/bench/_bench_hvd_worker.py predict-single [--save single.npy]
"""

from __future__ import annotations

import argparse
import contextlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tensorflow as tf
from _bench_hooks import HookProfile
from _bench_mnist import build_model, mnist_like

MODES = ("det", "plain", "predict-det", "predict-single")
KERAS_3 = int(str(getattr(tf.keras, "__version__", "2")).split(".")[0]) >= 3


# --- data and model ---------------------------------------------------------------------------


def fixed_model(seed: int) -> tf.keras.Model:
    """The convnet with weights drawn by NumPy from ``seed``: the same in every process,
    whatever TensorFlow's random state (``det_sdk``'s init() switches Keras's initializers
    to ``tf.random.Generator``)."""
    model = build_model()
    rng = np.random.default_rng(seed)
    model.set_weights([(rng.standard_normal(w.shape) * 0.05).astype(np.float32)
                       for w in model.get_weights()])
    return model


def compile_model(model: tf.keras.Model, optimizer: Any) -> None:
    model.compile(loss="categorical_crossentropy", optimizer=optimizer, metrics=["accuracy"])


class SpanTimer(tf.keras.callbacks.Callback):
    """End of epoch ``warmup_epochs - 1`` (or first train begin) to the last ``on_train_end``."""

    def __init__(self, warmup_epochs: int) -> None:
        super().__init__()
        self._supports_tf_logs = True  # never makes Keras convert batch logs for it
        self.warmup_epochs = warmup_epochs
        self.begin: float | None = None
        self.end: float | None = None
        self.cpu_begin = self.cpu_end = 0.0  # this process's CPU time (all its threads)
        self.history: dict[str, float] = {}

    def _start(self) -> None:
        self.begin, self.cpu_begin = time.perf_counter(), time.process_time()

    def on_train_begin(self, logs: Any = None) -> None:
        if self.warmup_epochs == 0 and self.begin is None:
            self._start()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if epoch == self.warmup_epochs - 1:
            self._start()
        self.history = {k: float(v) for k, v in (logs or {}).items()}

    def on_train_end(self, logs: Any = None) -> None:
        self.end, self.cpu_end = time.perf_counter(), time.process_time()

    @property
    def cpu(self) -> float:
        return self.cpu_end - self.cpu_begin

    @property
    def span(self) -> float:
        assert self.begin is not None and self.end is not None, "training never ran"
        return self.end - self.begin


class ProfileWindow(tf.keras.callbacks.Callback):
    """Switch a :class:`HookProfile` on after the warm-up epoch(s)."""

    def __init__(self, profile: HookProfile, warmup_epochs: int) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self.profile, self.warmup_epochs = profile, warmup_epochs

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if epoch == self.warmup_epochs - 1:
            self.profile.active = True

    def on_train_end(self, logs: Any = None) -> None:
        self.profile.active = False


def emit(result: dict[str, Any], out: str | None) -> None:
    line = json.dumps(result, sort_keys=True)
    print("BENCH " + line, flush=True)
    if out:
        Path(out).write_text(line + "\n")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# --- fit ----------------------------------------------------------------------------------------


def fit_det(args: argparse.Namespace) -> None:
    import det_sdk as det

    # det_sdk's default: a checkpoint at every epoch end (--no-checkpoints: none)
    period = {} if args.checkpoints else {"checkpoint_period": False}
    context = det.keras.init(runs_dir=args.runs_dir, seed=args.seed, **period)
    dist = context.distributed
    data = mnist_like(args.samples, args.val_samples)
    x, y = context.wrap_data(data["x"], data["y"])
    x_val, y_val = context.wrap_data(data["x_val"], data["y_val"])
    model = build_model()
    compile_model(model, context.wrap_optimizer(tf.keras.optimizers.SGD(args.lr)))

    profile = HookProfile()
    callbacks: list[tf.keras.callbacks.Callback] = []
    if args.profile:
        callbacks.append(ProfileWindow(profile, args.warmup_epochs))
    timer = SpanTimer(args.warmup_epochs)
    callbacks.append(timer)
    t0 = time.perf_counter()
    with profile.installed() if args.profile else contextlib.nullcontext():
        context.fit(model, x=x, y=y, batch_size=dist.shard_batch_size(args.global_batch),
                    epochs=args.epochs + args.warmup_epochs, validation_data=(x_val, y_val),
                    verbose=0, callbacks=callbacks)
    wall = time.perf_counter() - t0
    spans = dist.allgather((timer.span, timer.cpu))
    profiles = dist.allgather(profile.as_dict()) if args.profile else None
    if dist.is_chief:
        result = _fit_result("det", args, dist.size, timer, wall, spans,
                             threads=cores() // dist.local_size)
        if profiles is not None:
            result["profile_per_rank"] = profiles
        emit(result, args.out)
    context.close()


def _hand_written_averaging(hvd: Any, base: type) -> type:
    """What a user would write without det_sdk: average in the optimizer's step.

    Horovod's own Keras wrappers average nothing on Keras 3 (and only inside
    ``minimize`` on Keras 2), so a correct hand-written script overrides where
    gradients are applied, with Horovod's plain ops: the same averaging det_sdk uses.
    """
    if KERAS_3:
        class Averaged(base):
            def apply(self, grads, trainable_variables=None):
                grads = hvd.grouped_allreduce(list(grads), op=hvd.Average)
                return super().apply(grads, trainable_variables)
    else:
        class Averaged(base):
            def apply_gradients(self, grads_and_vars, *args, **kwargs):
                pairs = list(grads_and_vars)
                grads = hvd.grouped_allreduce([g for g, _ in pairs], op=hvd.Average)
                return super().apply_gradients(zip(grads, [v for _, v in pairs]),
                                               *args, **kwargs)
    return Averaged


class _AverageEpochLogs(tf.keras.callbacks.Callback):
    """The epoch's metrics averaged over the processes (one allreduce per metric)."""

    def __init__(self, hvd: Any) -> None:
        super().__init__()
        self.hvd = hvd

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        for k in sorted(logs or {}):
            logs[k] = float(self.hvd.allreduce(np.float32(logs[k]), op=self.hvd.Average,
                                               name=f"avg.{k}"))


def fit_plain(args: argparse.Namespace) -> None:
    import horovod.tensorflow as hvd

    hvd.init()
    threads: int | list[int] | None = None
    if not args.default_threads:  # as det_sdk's init() does, before TF's first op
        threads = max(1, cores() // hvd.local_size())
        intra, inter = args.intra_threads or threads, args.inter_threads or threads
        if (intra, inter) != (threads, threads):
            threads = [intra, inter]
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    rank, size = hvd.rank(), hvd.size()
    tf.keras.utils.set_random_seed(args.seed + rank)
    data = mnist_like(args.samples, args.val_samples)

    def part(a: np.ndarray) -> np.ndarray:
        return a[len(a) * rank // size: len(a) * (rank + 1) // size]

    model = build_model()
    optimizer = _hand_written_averaging(hvd, tf.keras.optimizers.SGD)(args.lr)
    compile_model(model, optimizer)
    # rank 0's weights and optimizer state everywhere before the first step
    optimizer.build(model.trainable_variables)
    variables = [*model.weights, *optimizer.variables]
    hvd.broadcast_variables([v.value if KERAS_3 else v for v in variables], root_rank=0)
    timer = SpanTimer(args.warmup_epochs)
    callbacks: list[tf.keras.callbacks.Callback] = [_AverageEpochLogs(hvd)]
    if args.checkpoints and rank == 0:
        # the same work det_sdk does by default: model and optimizer state saved at every
        # epoch end, by Keras's own callback for it
        callbacks.append(tf.keras.callbacks.BackupAndRestore(args.backup_dir or tempfile.mkdtemp()))
    callbacks.append(timer)
    batch = args.global_batch // size
    if args.feed == "tfdata":
        # the fastest fair input: each rank's part as a shuffled, prefetched dataset
        train: Any = (tf.data.Dataset.from_tensor_slices((part(data["x"]), part(data["y"])))
                      .shuffle(len(part(data["x"])), seed=args.seed + rank)
                      .batch(batch).prefetch(tf.data.AUTOTUNE))
        val: Any = (tf.data.Dataset.from_tensor_slices((part(data["x_val"]), part(data["y_val"])))
                    .batch(batch).prefetch(tf.data.AUTOTUNE))
        fit_data: dict[str, Any] = {"x": train}
    else:
        fit_data = {"x": part(data["x"]), "y": part(data["y"]), "batch_size": batch}
        val = (part(data["x_val"]), part(data["y_val"]))
    t0 = time.perf_counter()
    model.fit(**fit_data, epochs=args.epochs + args.warmup_epochs, validation_data=val,
              verbose=0, callbacks=callbacks)
    wall = time.perf_counter() - t0
    spans = hvd.allgather_object((timer.span, timer.cpu), name="bench.spans")
    if rank == 0:
        mode = ("plain-default-threads" if args.default_threads else
                "plain" if isinstance(threads, int) else f"plain-threads-{threads[0]}-{threads[1]}")
        mode += f"-{args.feed}" + ("-checkpoints" if args.checkpoints else "")
        emit(_fit_result(mode, args, size, timer, wall, spans, threads=threads), args.out)


def _fit_result(mode: str, args: argparse.Namespace, size: int, timer: SpanTimer, wall: float,
                spans: list[tuple[float, float]], threads: int | list[int] | None
                ) -> dict[str, Any]:
    """Rank 0's result; ``spans``: every rank's (span, CPU seconds in the span)."""
    samples = args.epochs * args.samples
    cpu = sum(c for _, c in spans)
    return {
        "mode": mode, "processes": size, "threads_per_process": threads,
        "timed_epochs": args.epochs, "samples": args.samples, "global_batch": args.global_batch,
        "span_s": round(timer.span, 4), "samples_per_s": round(samples / timer.span, 2),
        "span_per_rank_s": [round(s, 4) for s, _ in spans], "fit_wall_s": round(wall, 3),
        # CPU seconds of all ranks in the span: less sensitive to other work on the machine
        "cpu_s": round(cpu, 3), "samples_per_cpu_s": round(samples / cpu, 2),
        "last_epoch_logs": {k: round(v, 4) for k, v in timer.history.items()},
    }


# --- predict ------------------------------------------------------------------------------------


def _predict_rows(args: argparse.Namespace) -> np.ndarray:
    return mnist_like(args.rows, 1, seed=args.seed)["x"]


def _predict_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"verbose": 0, **({"batch_size": args.batch_size} if args.batch_size else {})}


def predict_det(args: argparse.Namespace) -> None:
    import det_sdk as det
    from det_sdk.keras import _data

    context = det.keras.init(runs_dir=args.runs_dir, checkpoint_period=False, seed=args.seed)
    dist = context.distributed
    x = _predict_rows(args)
    model = fixed_model(args.seed)  # the same weights on every rank and in one process
    kw = _predict_kwargs(args)
    xw = context.wrap_data(x)
    out = context.predict(model, xw, **kw)  # warm-up: traces predict, first collectives

    totals, locals_, gathers, pure = [], [], [], []
    for _ in range(args.repeats):
        dist.barrier()
        t0 = time.perf_counter()
        out = context.predict(model, xw, **kw)
        totals.append(time.perf_counter() - t0)
        # The same pieces, timed apart (as KerasContext.predict runs them).
        dist.barrier()
        t0 = time.perf_counter()
        xl, _, _, _, _ = _data.local_part(dist, xw)
        local = model.predict(xl, **kw)
        t1 = time.perf_counter()
        gathered = tf.nest.map_structure(dist.gather_arrays, local)
        t2 = time.perf_counter()
        locals_.append(t1 - t0)
        gathers.append(t2 - t1)  # includes waiting for the slower rank
        dist.barrier()
        t0 = time.perf_counter()
        tf.nest.map_structure(dist.gather_arrays, local)  # both ranks ready: transfer only
        pure.append(time.perf_counter() - t0)
        assert np.array_equal(gathered, out)
    per_rank_local = dist.allgather(statistics.median(locals_))
    if dist.is_chief:
        result: dict[str, Any] = {
            "mode": "predict-det", "processes": dist.size, "rows": args.rows,
            "repeats": args.repeats,
            "predict_s": round(statistics.median(totals), 4),
            "local_predict_s": round(statistics.median(locals_), 4),
            "local_predict_per_rank_s": [round(t, 4) for t in per_rank_local],
            "gather_s": round(statistics.median(gathers), 5),
            "gather_after_barrier_s": round(statistics.median(pure), 5),
            "gather_share": round(statistics.median(
                g / (g + p) for g, p in zip(gathers, locals_)), 5),
            "gather_after_barrier_share": round(statistics.median(pure) /
                                                statistics.median(totals), 5),
        }
        assert out.shape == (args.rows, 10), out.shape
        if args.reference:
            ref = np.load(args.reference)
            np.testing.assert_allclose(out, ref, atol=1e-5)
            result["max_abs_diff_vs_single"] = float(np.abs(out - ref).max())
        emit(result, args.out)
    context.close()


def predict_single(args: argparse.Namespace) -> None:
    x = _predict_rows(args)
    model = fixed_model(args.seed)
    kw = _predict_kwargs(args)
    out = model.predict(x, **kw)  # warm-up
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = model.predict(x, **kw)
        times.append(time.perf_counter() - t0)
    if args.save:
        np.save(args.save, out)
    emit({"mode": "predict-single", "processes": 1, "rows": args.rows, "repeats": args.repeats,
          "predict_s": round(statistics.median(times), 4)}, args.out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--runs-dir", default=None, help="det_sdk runs directory (det modes)")
    parser.add_argument("--out", default=None, help="also write the result JSON here (rank 0)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--samples", type=int, default=8192, help="training samples (fit)")
    parser.add_argument("--val-samples", type=int, default=1024, help="validation samples (fit)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs (fit)")
    parser.add_argument("--warmup-epochs", type=int, default=1, help="untimed epochs first")
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--no-checkpoints", dest="checkpoints", action="store_false",
                        help="fit: no checkpoints (default: one per epoch on both sides, "
                             "det_sdk's default)")
    parser.add_argument("--feed", choices=("tfdata", "numpy"), default="tfdata",
                        help="plain: the input pipeline (default tf.data, the faster)")
    parser.add_argument("--backup-dir", default=None, help="plain: BackupAndRestore's directory")
    parser.add_argument("--default-threads", action="store_true",
                        help="plain: leave TensorFlow's thread pools at their defaults")
    parser.add_argument("--intra-threads", type=int, default=None,
                        help="plain: intra-op threads instead of cores // processes-per-host")
    parser.add_argument("--inter-threads", type=int, default=None,
                        help="plain: inter-op threads instead of cores // processes-per-host")
    parser.add_argument("--profile", action="store_true",
                        help="det: time the hooks of det_sdk's callbacks after the warm-up")
    parser.add_argument("--rows", type=int, default=20000, help="rows to predict")
    parser.add_argument("--batch-size", type=int, default=None, help="predict batch size")
    parser.add_argument("--repeats", type=int, default=3, help="timed predicts per process")
    parser.add_argument("--reference", default=None,
                        help="predict-det: .npy of one process's predictions to compare with")
    parser.add_argument("--save", default=None, help="predict-single: save predictions (.npy)")
    args = parser.parse_args(argv)
    {"det": fit_det, "plain": fit_plain, "predict-det": predict_det,
     "predict-single": predict_single}[args.mode](args)


if __name__ == "__main__":
    main()
