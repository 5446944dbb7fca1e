"""``context.predict(model, data, output=DIR)``: predictions streamed to part files.

Each process predicts its share of the input's *global batches* one at a time
(``_compat.predict_batches``: what ``model.predict`` computes for that batch) and a
writer thread writes each batch's predictions as
the part named by its global index (det_sdk.predictions), so memory holds a few
batches whatever the number of rows, and the disk writes overlap the next batches'
predictions. Global batch ``b`` is, by data kind:

- numpy (full, or wrapped by ``wrap_data``): rows ``[b*batch_size, (b+1)*batch_size)``
  of the full arrays; process ``r`` predicts the batches ``b % size == r``;
- numpy that is each process's own (derived from wrapped views): the processes' rows
  one after the other in rank order, each cut into batches;
- a ``keras.utils.Sequence`` (whole or wrapped): its batch ``b``, dealt out as above;
- a ``tf.data.Dataset``: its element ``b``. A dataset wrapped by ``wrap_data``
  (``ds.shard(size, rank)``, found in its pipeline) gives process ``r`` its elements
  ``i*size + r``; a whole dataset is sharded so here.

A rerun into the same directory skips the batches whose parts are complete.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import xxhash

from det_sdk.core._context import Context
from det_sdk.distributed import Processes
from det_sdk.errors import ArgumentTypeError, UsageError
from det_sdk.keras import _compat, _data
from det_sdk.predictions import PartWriter as _Writer
from det_sdk.predictions import (
    StopAsked,
    StreamedPredictions,
    digest_arrays,
    gather_failures,
    open_store,
    output_store,
    resolve_output,
)

__all__ = ["StreamedPredictions", "predict_to", "resolve_output"]

_ACCEPTED = {"batch_size", "verbose"}


# --- the input's global batches ------------------------------------------------------------


@dataclass
class _Plan:
    """This process's global batches and how to get their inputs."""

    fingerprint: dict[str, Any]
    total: int | None  # global batches, when known before predicting
    mine: list[int] | None  # this process's global batch indices (None: a dataset's, unsized)
    fetch: Callable[[int], Any] | None  # global index -> model input (arrays, Sequence)
    dataset: Any = None  # tf.data: this process's elements, in order
    # steps every process walks (its batches, padded to the most any process has), so
    # that all meet at the same ones; None: not known in advance (an unsized dataset)
    steps: int | None = None


def _unpack_x(batch: Any) -> Any:
    """The inputs of a batch given as ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, w)``."""
    if isinstance(batch, list):
        batch = tuple(batch)
    if isinstance(batch, tuple) and len(batch) in (1, 2, 3):
        return batch[0]
    return batch


def _leaves(struct: Any) -> list[np.ndarray]:
    return [np.asarray(a) for a in tf.nest.flatten(struct)]


def _plan(dist: Processes, x: Any, batch_size: int) -> _Plan:
    rank, size = dist.rank, dist.size
    if _data.is_array_data(x):
        _data.check_not_cut(x, "context.predict: x")
        if size > 1 and _data.is_per_process(x):
            return _per_process_plan(dist, x, batch_size)
        full = _data.full_data(x)
        n = _data.num_rows(full)
        total = math.ceil(n / batch_size)
        fp = {"kind": "arrays", "rows": n, "batch_size": batch_size,
              "digest": digest_arrays(_leaves(full)) if dist.is_chief else None}
        return _Plan(fp, total, list(range(rank, total, size)),
                     lambda b: _data.slice_rows(full, b * batch_size, (b + 1) * batch_size),
                     steps=math.ceil(total / size))
    if isinstance(x, _compat.SequenceBase):
        full = x.full if isinstance(x, _data.ShardedSequence) else x
        total = len(full)
        fp = {"kind": "sequence", "batches": total,
              "digest": digest_arrays(_leaves(_unpack_x(full[0])))
              if dist.is_chief and total else None}
        return _Plan(fp, total, list(range(rank, total, size)),
                     lambda b: _unpack_x(full[b]), steps=math.ceil(total / size))
    if isinstance(x, tf.data.Dataset):
        return _dataset_plan(dist, x)
    raise ArgumentTypeError(
        "context.predict: with output=, x must be numpy arrays (or lists/dicts of them), a "
        f"keras.utils.Sequence or a tf.data.Dataset; got {type(x).__name__}")


def _per_process_plan(dist: Processes, x: Any, batch_size: int) -> _Plan:
    """Each process's own rows, placed after the lower ranks' rows."""
    n = _data.num_rows(x)
    counts = dist.allgather((n, digest_arrays(_leaves(x))))
    batches = [math.ceil(c / batch_size) for c, _ in counts]
    first = sum(batches[:dist.rank])
    fp = {"kind": "arrays-per-process", "rows": sum(c for c, _ in counts),
          "batch_size": batch_size,
          "digest": xxhash.xxh3_64("".join(d for _, d in counts).encode()).hexdigest()}
    return _Plan(fp, sum(batches), list(range(first, first + batches[dist.rank])),
                 lambda b: _data.slice_rows(x, (b - first) * batch_size,
                                            (b - first + 1) * batch_size),
                 steps=max(batches))


def _dataset_plan(dist: Processes, ds: Any) -> _Plan:
    size = dist.size
    if size > 1 and not _data.dataset_sharded_for(ds, dist.rank, size):
        ds = ds.shard(size, dist.rank)  # the whole dataset: element i*size + rank is ours
    local = int(ds.cardinality())
    counts: list[int | None] = dist.allgather(local if local >= 0 else None)
    known = [c for c in counts if c is not None]
    total = sum(known) if len(known) == len(counts) else None
    first = next(iter(ds.take(1)), None) if dist.is_chief else None
    fp = {"kind": "dataset", "batches": total,
          "digest": digest_arrays(_leaves(_unpack_x(first))) if first is not None else None}
    mine = list(range(dist.rank, total, size)) if total is not None else None
    return _Plan(fp, total, mine, None, dataset=ds,
                 steps=None if total is None else math.ceil(total / size))


def _model_fingerprint(model: Any) -> dict[str, Any]:
    """The model's class and a digest of its weights' values (not their names, which
    depend on what else the script built before it)."""
    h = xxhash.xxh3_64()
    for v in model.weights:
        a = np.ascontiguousarray(np.asarray(v))
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.view(np.uint8).reshape(-1).data)
    return {"class": type(model).__name__, "weights": h.hexdigest()}


# --- the loop -------------------------------------------------------------------------------


def _dataset_batches(plan: _Plan, dist: Processes,
                     done: set[int]) -> Iterator[tuple[int, Any]]:
    """(global index, inputs) of this process's dataset elements not done yet; the done
    prefix is skipped without being read."""
    rank, size = dist.rank, dist.size
    skip = 0
    while skip * size + rank in done:
        skip += 1
    for i, element in enumerate(plan.dataset.skip(skip), start=skip):
        b = i * size + rank
        if b not in done:
            yield b, _unpack_x(element)


def _steps(plan: _Plan, dist: Processes,
           done: set[int]) -> Iterator[tuple[int, int | None, Any]]:
    """(step, global index or None, inputs) for this process: step ``i`` is its ``i``-th
    global batch (None: done already, or past its last). With a known number of batches
    every process walks the same steps, so that they can meet at the same ones (a stop
    asked by the master); an unsized dataset's steps are its elements'."""
    rank, size = dist.rank, dist.size
    if plan.dataset is not None:
        batches = _dataset_batches(plan, dist, done)
        if plan.steps is None:
            for b, inputs in batches:
                yield (b - rank) // size, b, inputs
            return
        pending = next(batches, None)
        for i in range(plan.steps or 0):
            if pending is not None and (pending[0] - rank) // size == i:
                yield i, pending[0], pending[1]
                pending = next(batches, None)
            else:
                yield i, None, None
        return
    assert plan.mine is not None and plan.fetch is not None
    for i in range(plan.steps or len(plan.mine)):
        if i >= len(plan.mine) or plan.mine[i] in done:
            yield i, None, None
        else:
            yield i, plan.mine[i], plan.fetch(plan.mine[i])


def _fed(plan: _Plan, dist: Processes, done: set[int],
         progress: _Progress) -> Iterator[tuple[int, Any]]:
    """The (global index, inputs) to predict, with a progress point after each step (the
    generator resumes once the batch before has been taken); ends early on a stop."""
    fed = 0
    for i, b, inputs in _steps(plan, dist, done):
        if b is not None:
            fed += 1
            yield b, inputs
        if progress.step(i, len(done) + fed):
            return


class _Progress:
    """Where the job is, for the master (``det job describe``), and whether to stop.

    A stop asked by the master (``det job pause`` / ``kill``) is taken between batches:
    the parts written so far are the progress, and a run into the same output resumes
    after them. The agreement is :class:`det_sdk.predictions.StopAsked`'s (the PyTorch
    front's too): one process checks the chief's flag every batch; N processes meet every
    ``SYNC_STEPS`` steps, each bringing its parts done, and a process that failed walks on
    to the next meeting, where all end."""

    REPORT_SECONDS = 1.0

    def __init__(self, dist: Processes, core: Context, plan: _Plan,
                 batch_size: int, path: Path | str, done: int) -> None:
        self.dist, self.core, self.plan, self.path = dist, core, plan, path
        rows = plan.fingerprint.get("rows")
        self.rows = int(rows) if rows is not None else None  # arrays: exact
        self.batch_rows = batch_size  # a Sequence's or dataset's: its first batch's rows
        self.parts = done  # all processes' parts done (as of the last meeting)
        self.stopped = False  # the master asked to stop: the batches fed are the last
        self.last = 0.0
        self.asked = StopAsked(dist, core.preempt)
        self.next_step = 0  # the first step not yet passed
        self.meeting = False  # inside a meeting's collective
        # the collective needs a known number of steps on every process
        self.sync = dist.size == 1 or plan.steps is not None

    def rows_of(self, parts: int) -> tuple[int, int | None]:
        if self.rows is not None:
            return min(self.rows, parts * self.batch_rows), self.rows
        total = None if self.plan.total is None else self.plan.total * self.batch_rows
        done = parts * self.batch_rows
        return (min(done, total) if total is not None else done), total

    def report(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.dist.is_chief and (force or now - self.last >= self.REPORT_SECONDS):
            self.last = now
            done, total = self.rows_of(self.parts)
            self.core.train.report_rows(done, total, str(self.path))

    def step(self, i: int, local_parts: int, failed: bool = False) -> bool:
        """After step ``i``: report (now and then); True on every process when to stop
        (``stopped`` when the master asked)."""
        self.next_step = i + 1
        if not self.sync:
            return False
        self.meeting = True
        stop = self.asked.after(i, failed=failed, carry=local_parts)
        self.meeting = False
        if self.asked.meets(i):
            self.parts = sum(self.asked.carried)
            self.report()
        self.stopped = self.stopped or (stop and self.asked.asked)
        return stop

    def failed(self, local_parts: int) -> None:
        """This process failed between meetings: walk on to the next one (if any is left),
        where every process ends, so that none waits in a collective it never joins."""
        if self.dist.size > 1 and self.sync and not self.meeting and self.plan.steps:
            for i in range(self.next_step, self.plan.steps):
                if self.asked.meets(i):
                    self.step(i, local_parts, failed=True)
                    return


def predict_to(dist: Processes, core: Context, model: Any, x: Any,
               output: str | os.PathLike[str], **kwargs: Any) -> StreamedPredictions:
    """Stream ``model``'s predictions for ``x`` into ``output`` (see the module doc)."""
    unknown = set(kwargs) - _ACCEPTED
    if unknown:
        raise UsageError(f"context.predict: with output=, only {sorted(_ACCEPTED)} are "
                         f"accepted besides model and x; got {sorted(unknown)}")
    batch_size = kwargs.get("batch_size") or 32
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ArgumentTypeError(f"context.predict: batch_size must be a positive int, got "
                                f"{batch_size!r}")
    verbose = kwargs.get("verbose", "auto")
    plan = _plan(dist, x, batch_size)
    # every process stops alike on the chief's refusal, none waits for others
    store = open_store(dist, output_store(core, output), plan.fingerprint,
                       _model_fingerprint(model))
    path = store.location

    done: set[int]
    if plan.mine is not None:
        done = store.complete_parts(plan.mine)
    else:  # an unsized dataset: this process's parts, found by their names
        done = store.complete_parts(
            i for i in store.written_parts() if i % dist.size == dist.rank)
    started, count, failure = time.monotonic(), 0, None
    progress = _Progress(dist, core, plan, batch_size, path,
                         sum(dist.allgather(len(done))) if dist.size > 1 else len(done))
    progress.report(force=True)
    writer = _Writer(store)
    try:
        for b, outputs in _compat.predict_batches(model, _fed(plan, dist, done, progress)):
            if count == 0 and progress.rows is None:
                progress.batch_rows = _batch_rows(outputs, batch_size)
            writer.put(b, outputs)
            count += 1
    except BaseException as err:
        failure = err
        progress.failed(len(done) + count)
    try:
        writer.close()
    except BaseException as err:
        failure = failure or err
    # every process ends here, failed or not, so that none waits on a dead one
    local = (plan.mine is not None and len(plan.mine)) or count + len(done)
    results = gather_failures(dist, store, failure, local, len(done))
    if progress.stopped:
        _stop(dist, core, progress, path, count)
    total = plan.total if plan.total is not None else sum(r[1] for r in results)
    resumed = sum(r[2] for r in results)
    summary = None
    if dist.is_chief:
        manifest = store.finish(total)
        summary = manifest["rows"]
        if verbose:
            took = time.monotonic() - started
            print(f"det_sdk: predictions: {manifest['rows']} rows in {total} parts in {path} "
                  f"({count} written by this process in {took:.1f} s, {resumed} kept from "
                  "an earlier run)", file=sys.stderr, flush=True)
    rows = dist.broadcast(summary)
    assert rows is not None  # the chief's count, on every process
    if dist.is_chief:
        core.train.report_rows(rows, rows, str(path))
    return StreamedPredictions(path=path, rows=rows, parts=total, resumed=resumed)


def _batch_rows(outputs: Any, default: int) -> int:
    leaves = tf.nest.flatten(outputs)
    shape = getattr(leaves[0], "shape", None) if leaves else None
    return int(shape[0]) if shape is not None and len(shape) and shape[0] else default


def _stop(dist: Processes, core: Context, progress: _Progress, path: Path | str,
          count: int) -> None:
    """The master asked the job to stop: every part written is complete (the writer has
    closed), which is the progress a resumed run starts from; the process exits 0 (a
    stop the master resumes on activate, not the end)."""
    if dist.is_chief:
        progress.report(force=True)
        core.preempt.acknowledge_preemption_signal()
        done, total = progress.rows_of(progress.parts)
        of = f" of {total}" if total is not None else ""
        print(f"det_sdk: stopped by the master after {done}{of} rows ({count} parts written "
              f"by this process) in {path}; activated, the job resumes from there",
              file=sys.stderr, flush=True)
    core.close()
    raise SystemExit(0)
