# ruff: noqa: E402  (the first line stamps the time, before any import)
"""Trial of scripts/bench/bench_pause.py: train a small model and stamp when things happen.

Each process appends ``{"name": ..., "t": time.time()}`` lines to
``<data.stamps_dir>/<DET_ALLOCATION_ID>.jsonl``:

    start            first line of this script (before any import)
    imported         tensorflow and det_sdk imported
    init             det.keras.init() returned
    fit_called       model and data built, context.fit about to be called
    restore_begin/_end   det_sdk's restore_state (a resumed process only)
    train_begin      first on_train_begin of a user callback (after det_sdk's restore)
    first_batch_end  first on_train_batch_end in this process
    preempt_seen     the SDK's preemption long-poll returned "preempt"
    save_begin/_end  TrainingLoop.save (snapshot handed to the writer) -> the wait for the write
    close_end        context.close() returned (queued reports delivered)
    fit_raised       the SystemExit of a stop (pause, kill) has left context.fit
    fit_unwound      that exception and fit's frames are freed (with the names of the
                     non-daemon threads still alive, which Python joins before atexit,
                     and ``gc_s``: seconds of garbage collection since fit_raised)
    atexit           last atexit handler (after the SDK's own), just before interpreter teardown

plus ``batch_s`` (median seconds between batch ends) and ``batches`` at exit. The
wrappers only time det_sdk's own functions; they change nothing they call.

``data``: ``stamps_dir``, ``params`` (model size), ``samples``, ``batch_size``.
"""

import time

T_START = time.time()

import atexit
import gc
import itertools
import json
import os
import statistics
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf
from model import build_model, make_data

import det_sdk as det
from det_sdk.client import MasterClient
from det_sdk.keras import _checkpoint, _context, _loop

T_IMPORTED = time.time()

_lock = threading.Lock()
_pending: list[dict[str, Any]] = [{"name": "start", "t": T_START},
                                  {"name": "imported", "t": T_IMPORTED}]
_out: list[Path] = []  # set once config_data is known


def stamp(name: str, **extra: Any) -> None:
    """Record ``name`` now; written at once when the stamps file is known."""
    with _lock:
        _pending.append({"name": name, "t": time.time(), **extra})
        if _out:
            with open(_out[0], "a") as f:
                f.writelines(json.dumps(s) + "\n" for s in _pending)
            _pending.clear()


def timed(fn: Callable[..., Any], begin: str, end: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stamp(begin)
        try:
            return fn(*args, **kwargs)
        finally:
            stamp(end)
    return wrapper


_preemption = MasterClient.preemption


def preemption(self: MasterClient, alloc_id: str, timeout_seconds: float) -> bool:
    answer = _preemption(self, alloc_id, timeout_seconds)
    if answer:
        stamp("preempt_seen")
    return answer


# Patched before init() so that the SDK's watcher thread uses the stamping versions.
MasterClient.preemption = preemption  # type: ignore[method-assign]
_checkpoint.restore_state = timed(_checkpoint.restore_state, "restore_begin", "restore_end")
# A save is a snapshot handed to the background writer, then (at a stop) the wait
# for that write: save_begin is the first, save_end the end of the second.
_save, _wait = _loop.TrainingLoop.save, _loop.TrainingLoop.wait_for_checkpoints


def save(*args: Any, **kwargs: Any) -> Any:
    stamp("save_begin")
    return _save(*args, **kwargs)


def wait_for_checkpoints(*args: Any, **kwargs: Any) -> Any:
    try:
        return _wait(*args, **kwargs)
    finally:
        stamp("save_end")


_loop.TrainingLoop.save = save  # type: ignore[method-assign]
_loop.TrainingLoop.wait_for_checkpoints = wait_for_checkpoints  # type: ignore[method-assign]
_context.KerasContext.close = timed(  # type: ignore[method-assign]
    _context.KerasContext.close, "close_begin", "close_end")

batch_ends: list[float] = []


def at_exit() -> None:
    gaps = [b - a for a, b in itertools.pairwise(batch_ends)]
    stamp("atexit", batches=len(batch_ends),
          batch_s=statistics.median(gaps) if gaps else None)


atexit.register(at_exit)  # before init(): runs after the SDK's own atexit handler

context = det.keras.init()
stamp("init")
data = context.config_data
Path(data["stamps_dir"]).mkdir(parents=True, exist_ok=True)
_out.append(Path(data["stamps_dir"]) / f"{os.environ['DET_ALLOCATION_ID']}.jsonl")

x, y = make_data(int(data["samples"]))
xv, yv = make_data(256, seed=1)
xs, ys = context.wrap_data(x, y)
model = build_model(int(data["params"]), context.wrap_optimizer(tf.keras.optimizers.Adam(1e-3)))


class Stamps(tf.keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.begun = False

    def on_train_begin(self, logs: Any = None) -> None:
        if not self.begun:  # a mid-epoch resume runs two model.fit segments
            self.begun = True
            stamp("train_begin")

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        batch_ends.append(time.time())
        if len(batch_ends) == 1:
            stamp("first_batch_end")


gc_spans: list[float] = []


def gc_timer(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        gc_spans.append(-time.perf_counter())
    elif gc_spans:
        gc_spans[-1] += time.perf_counter()


stamp("fit_called")
code: Any = 0
try:
    context.fit(model, x=xs, y=ys, batch_size=int(data["batch_size"]), epochs=1,
                validation_data=(xv, yv), callbacks=[Stamps()], verbose=0)
except SystemExit as stop:  # a pause or kill: the SDK has saved and asks us to exit
    stamp("fit_raised")
    gc.callbacks.append(gc_timer)  # how much of what follows is Python's garbage collector
    code = stop.code
# The exception, its traceback and fit's frames (datasets, iterators) are freed by now.
# Python joins the non-daemon threads at exit, before the atexit handlers.
stamp("fit_unwound", gc_s=sum(gc_spans), threads=sorted(
    t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()))
sys.exit(code)
