"""Benchmark: Keras 3 on JAX and PyTorch through ``det.keras.init()`` (issue 57).

On one backend (``--backend jax|torch``, run with ``KERAS_BACKEND`` set to it), side by
side in one process, in interleaved rounds (the order rotates each round), medians:

1. **fit overhead**: an MLP (784-256-256-10, Adam, batch 128, ``verbose=0``, no
   validation) trained for ``--epochs`` epochs by

   * A ``context.fit`` (a fresh ``det.keras.init()`` per fit, its own ``DET_RUNS_DIR``,
     det_sdk's defaults: a checkpoint at every epoch end),
   * B ``model.fit`` on the numpy arrays, as a user would call it,
   * C ``model.fit`` on det_sdk's own PyDataset (``EpochBatches``, what ``context.fit``
     feeds ``model.fit``; ``shuffle=False`` as there), without det_sdk's callback:
     A/C is the cost of the callback and its checkpoints alone, C/B the PyDataset's.

   The wall time of each call is timed (det_sdk's set-up and final checkpoint included);
   target A/B <= 1.02.
2. **time blocked per checkpoint**: a bigger MLP (784-1024-1024-10, Adam: 7.4 MB of
   weights, 22 MB with the optimizer's slots) for one epoch, checkpoints every ``k``
   batches:

   * det_sdk: ``context.fit`` with ``checkpoint_period={"batches": k}`` against
     ``checkpoint_period=False`` (both still write the final checkpoint),
   * Keras: ``model.fit`` with ``keras.callbacks.BackupAndRestore(save_freq=k)`` against
     none.

   Two measures: *direct*, the wall time inside ``FitDriver.checkpoint`` /
   ``BackupAndRestore._save_model`` (wrapped with a timer) per call, and *difference*,
   (fit with - fit without) / extra checkpoints. Target det_sdk <= 0.5 x Keras's.
3. ``--dist`` (with ``--all``): 2 processes, steps/s (global batch 128, epochs after the
   first) of ``torchrun --nproc_per_node 2 --standalone`` on JAX and PyTorch and
   ``horovodrun -np 2 --gloo`` on TensorFlow (the TensorFlow engine), the same script
   (``--dist-worker``) launched in interleaved rounds. No target.

Usage::

    .venv/bin/python scripts/bench/keras_backends.py --all [--dist] [--reps 5]
    KERAS_BACKEND=jax .venv/bin/python scripts/bench/keras_backends.py --backend jax
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
BIN = Path(sys.executable).parent
BATCH = 128


# --- the models and data -----------------------------------------------------------------

def make_data(rows: int, seed: int = 0) -> tuple[Any, Any]:
    import numpy as np
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 784)).astype("float32")
    y = rng.integers(0, 10, size=rows).astype("int32")
    return x, y


def make_model(hidden: int, seed: int, optimizer: Any = None) -> Any:
    import keras
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((784,)),
                              keras.layers.Dense(hidden, activation="relu"),
                              keras.layers.Dense(hidden, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=optimizer or keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


# --- one backend ---------------------------------------------------------------------------

class Timed:
    """Wraps ``cls.name`` with a timer: calls and seconds spent inside, while active."""

    def __init__(self, cls: Any, name: str) -> None:
        self.cls, self.name, self.orig = cls, name, getattr(cls, name)
        self.calls, self.seconds = 0, 0.0
        timed = self

        def wrapper(obj: Any, *a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return timed.orig(obj, *a, **kw)
            finally:
                timed.calls += 1
                timed.seconds += time.perf_counter() - t0

        setattr(cls, name, wrapper)

    def reset(self) -> tuple[int, float]:
        out = (self.calls, self.seconds)
        self.calls, self.seconds = 0, 0.0
        return out


def one_backend(args: argparse.Namespace) -> dict[str, Any]:
    import keras

    import det_sdk as det
    from det_sdk.keras._neutral._data import EpochBatches
    from det_sdk.keras._neutral._fit import FitDriver

    backend = keras.backend.backend()
    top = Path(tempfile.mkdtemp(prefix=f"bench-kb-{backend}-"))
    os.environ["DET_RUNS_DIR"] = str(top / "runs")
    n_runs = [0]

    def context(period: Any = True) -> Any:
        n_runs[0] += 1
        return det.keras.init(runs_dir=str(top / f"runs{n_runs[0]}"), seed=args.seed,
                              checkpoint_period=period)

    result: dict[str, Any] = {"backend": backend, "load_before": os.getloadavg()[0]}
    print(f"== {backend}: keras {keras.__version__}, {os.cpu_count()} cpus, load "
          f"{os.getloadavg()[0]:.2f}", flush=True)

    # --- 1. context.fit vs model.fit -----------------------------------------------------
    x, y = make_data(args.rows, args.seed)
    ctx0 = context()
    dist = ctx0.distributed
    models = {k: make_model(256, args.seed) for k in "ABC"}

    def fit(which: str) -> float:
        model = models[which]
        t0 = time.perf_counter()
        if which == "A":
            ctx = context()
            t0 = time.perf_counter()
            ctx.fit(model, x=x, y=y, batch_size=BATCH, epochs=args.epochs, verbose=0)
            wall = time.perf_counter() - t0
            ctx.close()
            return wall
        if which == "B":
            model.fit(x, y, batch_size=BATCH, epochs=args.epochs, verbose=0)
        else:
            data = EpochBatches.of((x, y), batch_size=BATCH, dist=dist, seed=args.seed)
            model.fit(data, epochs=args.epochs, shuffle=False, verbose=0)
        return time.perf_counter() - t0

    for which in "ABC":  # warm-up: tracing/compiling
        fit(which)
    times: dict[str, list[float]] = {k: [] for k in "ABC"}
    orders = ["ABC", "BCA", "CAB", "CBA", "BAC", "ACB"]
    for r in range(args.reps):
        for which in orders[r % len(orders)]:
            times[which].append(fit(which))
        print(f"  fit round {r + 1}: " + "  ".join(f"{k} {times[k][-1]:.3f}s" for k in "ABC"),
              flush=True)
    ratio_ab = statistics.median(a / b for a, b in zip(times["A"], times["B"]))
    ratio_ac = statistics.median(a / c for a, c in zip(times["A"], times["C"]))
    ratio_cb = statistics.median(c / b for c, b in zip(times["C"], times["B"]))
    result["fit"] = {"epochs": args.epochs, "rows": args.rows,
                     "batches_per_epoch": -(-args.rows // BATCH),
                     **{f"{k}_median_s": statistics.median(v) for k, v in times.items()},
                     "times": times, "A/B": ratio_ab, "A/C": ratio_ac, "C/B": ratio_cb}
    ctx0.close()

    # --- 2. time blocked per checkpoint -------------------------------------------------
    k = args.every
    xb, yb = make_data(args.ckpt_rows, args.seed + 1)
    big = {key: make_model(1024, args.seed) for key in ("det0", "det1", "keras0", "keras1")}
    n_params = big["det0"].count_params()
    det_ck = Timed(FitDriver, "checkpoint")
    bnr_ck = Timed(keras.callbacks.BackupAndRestore, "_save_model")

    def ck_fit(which: str) -> tuple[float, int, float]:
        model = big[which]
        if which.startswith("det"):
            ctx = context({"batches": k} if which == "det1" else False)
            det_ck.reset()
            t0 = time.perf_counter()
            ctx.fit(model, x=xb, y=yb, batch_size=BATCH, epochs=1, verbose=0)
            wall = time.perf_counter() - t0
            ctx.close()
            return (wall, *det_ck.reset())
        callbacks = []
        if which == "keras1":
            callbacks = [keras.callbacks.BackupAndRestore(
                str(top / f"backup{time.monotonic_ns()}"), save_freq=k)]
        bnr_ck.reset()
        t0 = time.perf_counter()
        model.fit(xb, yb, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
        return (time.perf_counter() - t0, *bnr_ck.reset())

    names = ["det0", "det1", "keras0", "keras1"]
    for which in names:
        ck_fit(which)
    runs: dict[str, list[tuple[float, int, float]]] = {n: [] for n in names}
    for r in range(args.reps):
        order = names[r % 4:] + names[:r % 4]
        if r % 2:
            order.reverse()
        for which in order:
            runs[which].append(ck_fit(which))
        print(f"  checkpoint round {r + 1}: " + "  ".join(
            f"{n} {runs[n][-1][0]:.3f}s ({runs[n][-1][1]} saves, {runs[n][-1][2]:.3f}s)"
            for n in names), flush=True)

    def per_call(n: str, base: str) -> dict[str, float]:
        direct = [s / c for _, c, s in runs[n] if c]
        # the extra saves: det_sdk's base run writes the final checkpoint too
        diff = [(w - w0) / max(1, c - c0)
                for (w, c, _), (w0, c0, _) in zip(runs[n], runs[base])]
        extra = runs[n][0][1] - runs[base][0][1]
        return {"direct_s": statistics.median(direct), "difference_s": statistics.median(diff),
                "saves_per_fit": runs[n][0][1], "extra_saves": extra,
                "fit_s": statistics.median(w for w, _, _ in runs[n]),
                "fit_without_s": statistics.median(w for w, _, _ in runs[base])}

    det_r, ker_r = per_call("det1", "det0"), per_call("keras1", "keras0")
    result["checkpoint"] = {
        "every": k, "rows": args.ckpt_rows, "params": n_params,
        "weights_mb": n_params * 4 / 1e6, "det": det_r, "keras": ker_r,
        "ratio_direct": det_r["direct_s"] / ker_r["direct_s"],
        "ratio_difference": det_r["difference_s"] / ker_r["difference_s"],
        "runs": runs}
    if args.profile:
        result["profile"] = profile_checkpoint(context, big["det1"], xb, yb, k)
    result["load_after"] = os.getloadavg()[0]
    shutil.rmtree(top, ignore_errors=True)
    return result


def profile_checkpoint(context: Any, model: Any, x: Any, y: Any, k: int) -> str:
    """cProfile of one fit with checkpoints every ``k`` batches: FitDriver.checkpoint's parts."""
    import cProfile
    import io
    import pstats
    ctx = context({"batches": k})
    prof = cProfile.Profile()
    prof.enable()
    ctx.fit(model, x=x, y=y, batch_size=BATCH, epochs=1, verbose=0)
    prof.disable()
    ctx.close()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_callees("checkpoint")
    stats = pstats.Stats(prof, stream=out).sort_stats("tottime")
    stats.print_stats(18)
    return out.getvalue()


# --- 2 processes ---------------------------------------------------------------------------

def dist_worker(args: argparse.Namespace) -> None:
    """One process of a 2-process run (under torchrun or horovodrun)."""
    import keras

    import det_sdk as det

    ctx = det.keras.init(seed=args.seed)
    x, y = make_data(args.rows, args.seed)
    model = make_model(256, args.seed, ctx.wrap_optimizer(keras.optimizers.Adam(1e-3)))
    x, y = ctx.wrap_data(x, y)
    marks: list[float] = []

    class Span(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            marks.append(time.perf_counter())

    ctx.fit(model, x=x, y=y, batch_size=ctx.distributed.shard_batch_size(BATCH),
            epochs=args.epochs + 1, verbose=0, callbacks=[Span()])
    if ctx.distributed.rank == 0:
        steps = args.epochs * -(-args.rows // BATCH)
        span = marks[-1] - marks[0]
        print("BENCH " + json.dumps({"steps": steps, "span_s": span,
                                     "steps_per_s": steps / span,
                                     "backend": keras.backend.backend()}), flush=True)
    ctx.close()


def launch(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    backend, launcher = {"jax": ("jax", "torchrun"), "torch": ("torch", "torchrun"),
                         "tensorflow": ("tensorflow", "horovodrun")}[kind]
    worker = [str(HERE), "--dist-worker", "--rows", str(args.dist_rows), "--epochs",
              str(args.dist_epochs), "--seed", str(args.seed)]
    if launcher == "torchrun":
        argv = [str(BIN / "torchrun"), "--nproc_per_node", "2", "--standalone", *worker]
    else:
        argv = [str(BIN / "horovodrun"), "-np", "2", "--gloo", sys.executable, *worker]
    with tempfile.TemporaryDirectory(prefix="bench-kb-dist-") as tmp:
        env = {**os.environ, "KERAS_BACKEND": backend, "DET_RUNS_DIR": f"{tmp}/runs",
               "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True,
                           timeout=args.timeout)
        wall = time.perf_counter() - t0
    lines = [ln for ln in p.stdout.splitlines() if "BENCH {" in ln]
    if p.returncode or not lines:
        raise RuntimeError(f"{kind} under {launcher}: exit {p.returncode}\n"
                           f"{p.stdout[-1500:]}\n{p.stderr[-3000:]}")
    return {**json.loads(lines[-1].split("BENCH ", 1)[1]), "launch_wall_s": wall}


def run_dist(args: argparse.Namespace) -> dict[str, Any]:
    kinds = ["jax", "torch", "tensorflow"]
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(args.dist_reps):
        for kind in (kinds if r % 2 == 0 else kinds[::-1]):
            got[kind].append(launch(kind, args))
            print(f"  dist round {r + 1} {kind}: {got[kind][-1]['steps_per_s']:.1f} steps/s "
                  f"(launch {got[kind][-1]['launch_wall_s']:.1f}s)", flush=True)
    return {k: {"steps_per_s": statistics.median(g["steps_per_s"] for g in v),
                "all": [g["steps_per_s"] for g in v]} for k, v in got.items()}


# --- the driver ----------------------------------------------------------------------------

def table(results: list[dict[str, Any]], dist: dict[str, Any] | None,
          fit_target: float, ck_target: float) -> str:
    rows: list[str] = []
    if results:
        rows = ["| backend | context.fit (A) | model.fit arrays (B) | model.fit PyDataset (C) "
                f"| A/B (target <= {fit_target:.2f}) | A/C | C/B |",
                "|---|---|---|---|---|---|---|"]
    for r in results:
        f = r["fit"]
        rows.append(f"| {r['backend']} | {f['A_median_s']:.3f} s | {f['B_median_s']:.3f} s | "
                    f"{f['C_median_s']:.3f} s | **{f['A/B']:.3f}** "
                    f"{'met' if f['A/B'] <= fit_target else 'missed'} | {f['A/C']:.3f} | "
                    f"{f['C/B']:.3f} |")
    if results:
        rows += ["", "| backend | det_sdk per checkpoint: direct / difference | "
                 "BackupAndRestore per save: direct / difference | det/Keras direct "
                 f"(target <= {ck_target:.2f}) | det/Keras difference |",
                 "|---|---|---|---|---|"]
    for r in results:
        c = r["checkpoint"]
        d, k = c["det"], c["keras"]
        rows.append(
            f"| {r['backend']} | {1e3 * d['direct_s']:.1f} ms / {1e3 * d['difference_s']:.1f} "
            f"ms ({d['extra_saves']} extra of {d['saves_per_fit']}) | "
            f"{1e3 * k['direct_s']:.1f} ms / {1e3 * k['difference_s']:.1f} ms "
            f"({k['saves_per_fit']} saves) | **{c['ratio_direct']:.2f}** "
            f"{'met' if c['ratio_direct'] <= ck_target else 'missed'} | "
            f"{c['ratio_difference']:.2f} |")
    if dist:
        rows += ["", "| 2 processes | launcher | steps/s (median) | runs |", "|---|---|---|---|"]
        for kind, launcher in (("jax", "torchrun"), ("torch", "torchrun"),
                               ("tensorflow", "horovodrun --gloo")):
            d = dist[kind]
            rows.append(f"| {kind} | {launcher} | {d['steps_per_s']:.1f} | "
                        + ", ".join(f"{v:.1f}" for v in d["all"]) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--all", action="store_true", help="both backends, one table")
    mode.add_argument("--backend", choices=["jax", "torch"])
    mode.add_argument("--dist-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dist", action="store_true", help="also the 2-process steps/s")
    p.add_argument("--dist-only", action="store_true",
                   help="with --all: only the 2-process steps/s")
    p.add_argument("--reps", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per fit (default 2)")
    p.add_argument("--rows", type=int, default=None,
                   help="rows, fit overhead (default: 32768 on JAX, 8192 on PyTorch: "
                        "an epoch of about 1-2 s on 2 CPU cores)")
    p.add_argument("--ckpt-rows", type=int, default=64 * BATCH, help="rows, checkpoint part")
    p.add_argument("--every", type=int, default=20, help="k: a checkpoint every k batches")
    p.add_argument("--dist-rows", type=int, default=16384)
    p.add_argument("--dist-epochs", type=int, default=2, help="measured epochs (after one)")
    p.add_argument("--dist-reps", type=int, default=3)
    p.add_argument("--timeout", type=int, default=1200, help="seconds per subprocess")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--profile", action="store_true", help="cProfile det_sdk's checkpoint")
    p.add_argument("--json", help="write the results there")
    p.add_argument("--fit-target", type=float, default=1.02)
    p.add_argument("--ckpt-target", type=float, default=0.5)
    args = p.parse_args(argv)

    if args.dist_worker:
        dist_worker(args)
        return 0
    if args.rows is None:
        args.rows = {"torch": 8192}.get(args.backend or "", 32768)
    if args.backend:
        if os.environ.get("KERAS_BACKEND") != args.backend:
            print(f"set KERAS_BACKEND={args.backend} (--all does)", file=sys.stderr)
            return 2
        res = one_backend(args)
        if args.json:
            Path(args.json).write_text(json.dumps(res))
        if args.profile:
            print(res["profile"])
        print(table([res], None, args.fit_target, args.ckpt_target))
        return 0

    print(f"load average before: {os.getloadavg()}", flush=True)
    results = []
    passed = [a for a in (argv if argv is not None else sys.argv[1:])
              if a not in ("--all", "--dist", "--dist-only")]
    with tempfile.TemporaryDirectory(prefix="bench-kb-") as tmp:
        for backend in () if args.dist_only else ("jax", "torch"):
            out = f"{tmp}/{backend}.json"
            env = {**os.environ, "KERAS_BACKEND": backend, "DET_RUNS_DIR": f"{tmp}/runs",
                   "PYTHONPATH": str(REPO)}
            try:
                subprocess.run([sys.executable, str(HERE), "--backend", backend, *passed,
                                "--json", out], env=env, check=True, timeout=args.timeout)
            except subprocess.SubprocessError as e:  # the other backend's figures still
                print(f"{backend}: no result ({e})", flush=True)
                continue
            results.append(json.loads(Path(out).read_text()))
    dist = run_dist(args) if args.dist or args.dist_only else None
    print(f"\nload average after: {os.getloadavg()}")
    for r in results:
        f, c = r["fit"], r["checkpoint"]
        print(f"{r['backend']}: {f['rows']} rows, {f['batches_per_epoch']} batches/epoch, "
              f"{f['epochs']} epochs; checkpoint part: {c['weights_mb']:.1f} MB of weights, "
              f"{c['rows'] // BATCH} batches, every {c['every']}; load "
              f"{r['load_before']:.1f} -> {r['load_after']:.1f}")
    print(table(results, dist, args.fit_target, args.ckpt_target))
    if args.json:
        Path(args.json).write_text(json.dumps({"backends": results, "dist": dist}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
