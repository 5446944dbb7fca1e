"""Benchmark: time spent in det_sdk's hooks per epoch, against Determined's callback and
Keras's ``BackupAndRestore``, timed the same way in one run.

The workload is the Keras MNIST convnet on generated MNIST-shaped data (batch 128),
each side with a checkpoint at every epoch end:

* ``det_sdk``: ``context.fit`` with ``det_sdk.keras.init()``'s defaults (a checkpoint
  every epoch, metrics, TensorBoard scalars). Its cost is the time inside every hook of
  det_sdk's callback classes, plus the time ``context.fit`` spends after its last
  ``model.fit`` returned (its final save and the wait for the background write: a
  training script cannot go on before that). The time before the first ``model.fit``
  (wrapping the data in a pipeline, restoring, broadcasting) is shown for information.
* ``determined``: ``model.fit`` with Determined's ``DeterminedCallback`` on a local core
  context (``determined.core._dummy_init``, shared-filesystem storage in a temporary
  directory), ``checkpoint_epochs=1``. Determined's Keras support needs Keras 2
  (``keras.src.saving.legacy``): on Keras 3 this side is reported as unavailable. Install
  it beside the environment without touching it:
  ``pip install --no-deps --target /tmp/detpkg determined==0.38.0 ruamel.yaml filelock
  appdirs`` and pass ``--determined-path /tmp/detpkg``.
* ``backup``: ``model.fit`` with ``keras.callbacks.BackupAndRestore`` (a backup every
  epoch).

Two figures per side, per epoch:

* **whole** (the gated one): everything the side costs the machine beyond a plain
  ``model.fit``: the training thread's time inside Keras's ``CallbackList`` (so Keras's
  dispatch of the side's callbacks and its handling of their logs count, not only the
  hooks' bodies), minus the same time of a plain ``model.fit`` with no callback of
  its own (the ``plain`` side, measured in the same rounds), plus the CPU time of the
  side's background threads (det_sdk's checkpoint writer and the threads that fsync
  its files: their threads' CPU clocks around each write and each fsync; Keras's and
  Determined's callbacks write inside their hooks), plus, for det_sdk, the time
  ``context.fit`` spends after its last ``model.fit``.
* **hooks** (``--breakdown`` only): each hook of the side's own callback classes is
  wrapped with a timer (the same wrapper for all): the training thread's time inside
  that side's code, hook by hook. The timers cost about a microsecond a call, which
  the whole figure then counts too: without ``--breakdown`` nothing is wrapped.

The sides run in rotating order (ABCD, BCDA, ...), each for ``--epochs`` epochs, for
``--reps`` rounds.

Gates, on the whole figure: det_sdk's ms per epoch <= ``--max-ms`` (default 6) and its
ratio to each other side measured in the same round (``plain`` aside) <= ``--max-share``
(default 0.5). Each prints its median over the rounds with a 95% bootstrap interval of
the median: OK when the interval is under the goal, MISSED when it is over it,
INCONCLUSIVE otherwise. A round in which other processes used more than
``--max-foreign`` of the machine is noisy and repeated; fewer than 3 clean rounds is
INCONCLUSIVE too, never OK. Exit status 0 when every gate is OK, 1 when one is
MISSED, 2 otherwise.

Usage::

    .venv-keras2/bin/python scripts/bench/bench_hooks.py --determined-path /tmp/detpkg
    .venv/bin/python scripts/bench/bench_hooks.py
"""

from __future__ import annotations

import argparse
import contextlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import tensorflow as tf
from _bench_hooks import HookProfile
from _bench_mnist import build_model, mnist_like
from bench_fit_checkpoint import median_interval
from bench_fit_overhead import machine_busy_seconds

import det_sdk as det


def det_sdk_callback_classes() -> list[type]:
    """Every Keras callback class det_sdk's Keras package defines."""
    import importlib
    import pkgutil

    import det_sdk.keras as pkg

    base = tf.keras.callbacks.Callback
    classes: list[type] = []
    for mod in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"det_sdk.keras.{mod.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, base) and value is not base
                    and value.__module__.startswith("det_sdk.") and value not in classes):
                classes.append(value)
    return classes


def compiled(seed: int) -> tf.keras.Model:
    tf.keras.utils.set_random_seed(seed)
    model = build_model()
    model.compile(loss="categorical_crossentropy", optimizer=tf.keras.optimizers.Adam(1e-3),
                  metrics=["accuracy"])
    return model


class Cost:
    """What one fit of a side cost, in seconds: its hooks, and Keras's CallbackList time
    (dispatch included) plus its background threads' CPU time plus what follows the fit."""

    def __init__(self, hooks: float, dispatch: float, background: float = 0.0,
                 after: float = 0.0) -> None:
        self.hooks, self.dispatch = hooks, dispatch
        self.background, self.after = background, after

    def whole(self, plain_dispatch: float) -> float:
        return self.dispatch - plain_dispatch + self.background + self.after


def _callback_list() -> type:
    return tf.keras.callbacks.CallbackList


def fit_with(callbacks: list[Any], model: tf.keras.Model, data: dict[str, Any], epochs: int,
             timer: HookProfile) -> Cost:
    """A plain ``model.fit`` with ``callbacks``: the time inside their hooks and inside
    Keras's CallbackList."""
    dispatch = HookProfile()
    timer.seconds = 0.0
    with timer.wrapping([type(c) for c in callbacks]), dispatch.wrapping([_callback_list()]):
        timer.active = dispatch.active = True
        model.fit(data["x"], data["y"], validation_data=(data["x_val"], data["y_val"]),
                  batch_size=128, epochs=epochs, verbose=0, callbacks=callbacks)
        timer.active = dispatch.active = False
    return Cost(timer.seconds, dispatch.seconds)


class Side:
    """One way of training with per-epoch checkpoints; ``run`` returns its cost."""

    name = ""
    profile_hooks = False  # time each hook (--breakdown); off, the hooks figure is 0

    def run(self, epochs: int) -> Cost:
        raise NotImplementedError


class Plain(Side):
    """``model.fit`` with no callback of its own: the CallbackList time every side has."""

    name = "plain"

    def __init__(self, data: dict[str, Any], seed: int, tmp: Path) -> None:
        self.timer = HookProfile(enabled=self.profile_hooks)
        self.data, self.seed = data, seed

    def run(self, epochs: int) -> Cost:
        return fit_with([], compiled(self.seed), self.data, epochs, self.timer)


class DetSdk(Side):
    name = "det_sdk"

    def __init__(self, data: dict[str, Any], seed: int, tmp: Path) -> None:
        self.timer = HookProfile(enabled=self.profile_hooks)
        self.classes = det_sdk_callback_classes()
        self.data, self.seed, self.tmp = data, seed, tmp
        self.before: list[float] = []
        self.after: list[float] = []
        self.runs = 0

    def run(self, epochs: int) -> Cost:
        from det_sdk import storage
        from det_sdk.engine.writer import CheckpointWriter

        self.runs += 1
        # a fresh run directory each time: a fit that resumes would train nothing
        context = det.keras.init(runs_dir=str(self.tmp / f"det-{self.runs}"), seed=self.seed)
        x, y = context.wrap_data(self.data["x"], self.data["y"])
        xv, yv = context.wrap_data(self.data["x_val"], self.data["y_val"])
        model = compiled(self.seed)
        inner_fit = model.fit
        marks: list[float] = []
        # Each write: the writer thread's CPU clock at its start and end, and its value
        # when the last model.fit ended, if the write was running then. The CPU it spends
        # after that, context.fit waits for (counted as wall time: the "after" figure).
        writes: list[dict[str, Any]] = []
        at_fit_end: dict[int, float] = {}

        def fit(*args: Any, **kwargs: Any) -> Any:
            marks.append(time.perf_counter())
            try:
                return inner_fit(*args, **kwargs)
            finally:
                # the clocks before the mark: a write that starts in between is then
                # subtracted by neither sum below, never by both
                at_fit_end.clear()
                for i, w in enumerate(writes):
                    if w["end"] is None:
                        with contextlib.suppress(OSError):  # ended in between
                            at_fit_end[i] = time.clock_gettime(w["clock"])
                marks.append(time.perf_counter())

        model.fit = fit  # context.fit calls model.fit: see when its own work ends
        background = [0.0]
        submit = CheckpointWriter.submit

        def timed_submit(writer: CheckpointWriter, write: Any) -> None:
            def timed() -> None:
                record = {"clock": time.pthread_getcpuclockid(threading.get_ident()),
                          "start": time.thread_time(), "end": None,
                          "wall": time.perf_counter()}
                writes.append(record)
                try:
                    write()
                finally:
                    record["end"] = time.thread_time()
                    background[0] += record["end"] - record["start"]
            submit(writer, timed)

        # the fsyncs run in a pool of threads (storage.fsync_together): their CPU too
        lock, fsync_path = threading.Lock(), storage.fsync_path

        def timed_fsync(path: Any) -> None:
            if not threading.current_thread().name.startswith("det_sdk-fsync"):
                fsync_path(path)  # the writer's own: its clock counts it
                return
            c0 = time.thread_time()
            try:
                fsync_path(path)
            finally:
                spent = time.thread_time() - c0
                with lock:
                    background[0] += spent

        dispatch = HookProfile()
        self.timer.seconds = 0.0
        CheckpointWriter.submit = timed_submit  # type: ignore[method-assign]
        storage.fsync_path = timed_fsync
        try:
            with self.timer.wrapping(self.classes), dispatch.wrapping([_callback_list()]):
                self.timer.active = dispatch.active = True
                t0 = time.perf_counter()
                context.fit(model, x=x, y=y, validation_data=(xv, yv), batch_size=128,
                            epochs=epochs, verbose=0)
                t1 = time.perf_counter()
                self.timer.active = dispatch.active = False
            context.close()
        finally:
            CheckpointWriter.submit = submit  # type: ignore[method-assign]
            storage.fsync_path = fsync_path
        # the writer's CPU while context.fit waited for it, already in the wait's time
        overlap = sum(w["end"] - at_fit_end[i] for i, w in enumerate(writes) if i in at_fit_end)
        overlap += sum(w["end"] - w["start"] for w in writes if w["wall"] >= marks[-1])
        background[0] -= max(0.0, overlap)
        self.before.append(marks[0] - t0)
        self.after.append(t1 - marks[-1])
        return Cost(self.timer.seconds + (t1 - marks[-1]), dispatch.seconds, background[0],
                    t1 - marks[-1])


class Determined(Side):
    name = "determined"

    def __init__(self, data: dict[str, Any], seed: int, tmp: Path) -> None:
        from determined import core
        from determined.keras import DeterminedCallback

        self.core, self.callback = core, DeterminedCallback
        self.timer = HookProfile(enabled=self.profile_hooks)
        self.data, self.seed, self.tmp = data, seed, tmp

    def run(self, epochs: int) -> Cost:
        model = compiled(self.seed)
        storage = self.tmp / "determined"
        # Off the cluster its checkpoints copy the working directory as the model's
        # code: make that an empty one, so only the checkpoint itself is measured.
        code_dir = self.tmp / "determined-code"
        code_dir.mkdir(exist_ok=True)
        os.chdir(code_dir)
        with self.core._dummy_init(checkpoint_storage=str(storage)) as core_context:
            cb = self.callback(core_context, checkpoint=None, continue_id=1,
                               checkpoint_epochs=1)
            return fit_with([cb], model, self.data, epochs, self.timer)


class Backup(Side):
    name = "backup"

    def __init__(self, data: dict[str, Any], seed: int, tmp: Path) -> None:
        self.timer = HookProfile(enabled=self.profile_hooks)
        self.data, self.seed, self.tmp = data, seed, tmp
        self.runs = 0

    def run(self, epochs: int) -> Cost:
        self.runs += 1
        model = compiled(self.seed)
        cb = tf.keras.callbacks.BackupAndRestore(str(self.tmp / f"backup-{self.runs}"))
        return fit_with([cb], model, self.data, epochs, self.timer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="clean rounds wanted (default 5)")
    parser.add_argument("--epochs", type=int, default=2, help="epochs per fit (default 2)")
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--val-samples", type=int, default=1024)
    parser.add_argument("--max-ms", type=float, default=6.0,
                        help="det_sdk's per-epoch hook time target in ms (default 6)")
    parser.add_argument("--max-share", type=float, default=0.5,
                        help="det_sdk / each other side, at most (default 0.5)")
    parser.add_argument("--max-foreign", type=float, default=0.15)
    parser.add_argument("--max-attempts", type=int, default=None)
    parser.add_argument("--determined-path", default=None,
                        help="a directory holding the `determined` package (see above)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--breakdown", action="store_true",
                        help="print where det_sdk's time goes, hook by hook")
    args = parser.parse_args(argv)
    Side.profile_hooks = args.breakdown
    if args.determined_path:
        sys.path.insert(0, args.determined_path)

    data = mnist_like(args.samples, args.val_samples, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as tmp_dir:
        tmp = Path(tmp_dir)
        sides: list[Side] = [DetSdk(data, args.seed, tmp), Backup(data, args.seed, tmp),
                             Plain(data, args.seed, tmp)]
        try:
            sides.insert(1, Determined(data, args.seed, tmp))
        except Exception as err:
            print(f"determined: unavailable here ({type(err).__name__}: {err})")
        from det_sdk.keras import _compat

        print(f"tf {tf.__version__}, keras {_compat.KERAS_VERSION}; "
              f"{args.samples} samples, batch 128, {args.epochs} epochs per fit; "
              f"load average {os.getloadavg()[0]:.2f}")
        for side in sides:  # warm-up: tracing, first checkpoint directories
            side.run(1)
        per_epoch: dict[str, list[float]] = {s.name: [] for s in sides if s.name != "plain"}
        hooks_only: dict[str, list[float]] = {name: [] for name in per_epoch}
        rounds = clean = 0
        max_attempts = args.max_attempts or 3 * args.reps
        while clean < args.reps and rounds < max_attempts:
            order = sides[rounds % len(sides):] + sides[:rounds % len(sides)]
            rounds += 1
            busy0, cpu0, t0 = machine_busy_seconds(), time.process_time(), time.perf_counter()
            costs = {s.name: s.run(args.epochs) for s in order}
            plain = costs.pop("plain").dispatch
            got = {n: 1e3 * c.whole(plain) / args.epochs for n, c in costs.items()}
            wall = time.perf_counter() - t0
            others = max(0.0, machine_busy_seconds() - busy0 - (time.process_time() - cpu0))
            foreign = others / (wall * (os.cpu_count() or 1))
            ok = foreign <= args.max_foreign
            clean += ok
            if ok:
                for name, ms in got.items():
                    per_epoch[name].append(ms)
                    hooks_only[name].append(1e3 * costs[name].hooks / args.epochs)
            print(f"round {rounds} ({'>'.join(s.name for s in order)}), ms/epoch whole"
                  + (" (hooks)" if args.breakdown else "") + ": " + ", ".join(
                      f"{n} {ms:.2f}"
                      + (f" ({1e3 * costs[n].hooks / args.epochs:.2f})" if args.breakdown
                         else "")
                      + (f" [writer CPU {1e3 * costs[n].background / args.epochs:.2f}]"
                         if costs[n].background else "") for n, ms in got.items())
                  + f" | others {100 * foreign:.0f}%{'' if ok else ' noisy'}", flush=True)
        det_side = sides[0]
        assert isinstance(det_side, DetSdk)
        if args.breakdown:
            fits = det_side.runs
            print(f"det_sdk, ms per fit of {args.epochs} epochs (mean of {fits} fits):")
            for key, total in sorted(det_side.timer.total.items(), key=lambda kv: -kv[1]):
                print(f"  {key:<40} {1e3 * total / fits:7.2f}")
            print(f"  {'after the last model.fit':<40} "
                  f"{1e3 * statistics.mean(det_side.after):7.2f}")
        print(f"det_sdk before its first model.fit (set-up, information): median "
              f"{1e3 * statistics.median(det_side.before):.1f} ms per fit")

    if clean < 3:
        print(f"INCONCLUSIVE: {clean} clean rounds of {rounds}; run again on a quieter machine")
        return 2
    print(f"\nover {clean} clean rounds, ms per epoch (checkpoint every epoch), whole: "
          "median [95% bootstrap interval of the median]"
          + (", median of the hooks alone in ()" if args.breakdown else ""))
    for name, values in per_epoch.items():
        med, lo, hi = median_interval(values)
        print(f"  {name:<11} {med:7.2f} [{lo:.2f}, {hi:.2f}]"
              + (f" ({statistics.median(hooks_only[name]):.2f})" if args.breakdown else ""))
    # a gate is met when the whole interval is under it, missed when it is all over it
    verdicts = [gate("det_sdk ms/epoch", per_epoch["det_sdk"], args.max_ms)]
    for name, values in per_epoch.items():
        if name != "det_sdk":  # each round's own ratio: both sides ran in it
            ratios = [mine / theirs for mine, theirs in zip(per_epoch["det_sdk"], values)]
            verdicts.append(gate(f"det_sdk / {name}", ratios, args.max_share))
    if "MISSED" in verdicts:
        return 1
    return 2 if "INCONCLUSIVE" in verdicts else 0


def gate(what: str, values: list[float], goal: float) -> str:
    """Print and return OK (the interval under ``goal``), MISSED (over) or INCONCLUSIVE."""
    med, lo, hi = median_interval(values)
    verdict = "OK" if hi <= goal else "MISSED" if lo > goal else "INCONCLUSIVE"
    print(f"{what}: {med:.3f} [{lo:.3f}, {hi:.3f}] (target <= {goal}) {verdict}")
    return verdict


if __name__ == "__main__":
    sys.exit(main())
