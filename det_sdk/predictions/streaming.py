"""What every front's streamed predict shares (det_sdk.keras, det_sdk.pytorch): the store
its ``output=`` names, the chief's opening of it for every process, the writer thread,
the agreement on stopping and the gathering of each process's outcome.
"""

from __future__ import annotations

import errno
import os
import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from det_sdk.errors import StateError, StorageError
from det_sdk.predictions.buckets import BucketPartStore
from det_sdk.predictions.errors import (
    PredictionsBusyError,
    PredictionsCorruptError,
    PredictionsDiskFullError,
    PredictionsMismatchError,
    disk_full,
)
from det_sdk.predictions.files import PartStore
from det_sdk.predictions.locations import resolve_output
from det_sdk.predictions.store import OutputStore

__all__ = ["PartWriter", "StopAsked", "StreamedPredictions", "gather_failures", "open_store",
           "output_store"]


@dataclass(frozen=True)
class StreamedPredictions:
    """What a streamed ``context.predict`` returns (on every process)."""

    #: the output: a directory, or an ``s3://``/``gs://``/``az://`` URL (either is what
    #: det_sdk.load_predictions reads)
    path: Path | str
    rows: int  #: rows predicted in all, this run's and earlier runs'
    parts: int  #: part files (global batches)
    resumed: int  #: parts an earlier run had written, kept as they were


def output_store(core: Any, output: str | os.PathLike[str]) -> OutputStore:
    """The store a streamed predict writes ``output`` through, not begun: a directory's
    :class:`PartStore`, or for a URL the bucket's
    (:class:`det_sdk.predictions.buckets.BucketPartStore`, with the credentials of the
    run's ``checkpoint_storage`` where it names the same bucket). The one place that
    tells the two apart: everything after it calls the same methods."""
    where = resolve_output(core, output)
    if isinstance(where, Path):
        return PartStore(where)
    checkpoints = getattr(core, "checkpoint", None)  # the run's storage, its credentials
    return BucketPartStore.open(where, getattr(checkpoints, "storage", None))


def open_store(dist: Any, store: OutputStore, fingerprint: Mapping[str, Any],
               model: Mapping[str, Any]) -> OutputStore:
    """The chief begins ``store`` (:meth:`PartStore.begin`); every process gets it, or
    the chief's refusal (another job's output, another run holding it, a damaged
    manifest, a full disk) raised alike, so that none waits on another. ``dist``: a
    DistributedContext (``is_chief``, ``broadcast``)."""
    problem: tuple[str, str] | None = None
    if dist.is_chief:
        try:
            store.begin(fingerprint, model)
        except PredictionsDiskFullError as err:
            problem = ("full", str(err.strerror))
        except (PredictionsMismatchError, PredictionsCorruptError, StorageError) as err:
            problem = (type(err).__name__, str(err))
    problem = dist.broadcast(problem)
    if problem is not None:
        kind, message = problem
        if kind == "full":
            raise PredictionsDiskFullError(errno.ENOSPC, message)
        raise {"PredictionsBusyError": PredictionsBusyError,
               "PredictionsCorruptError": PredictionsCorruptError,
               "StorageError": StorageError}.get(kind, PredictionsMismatchError)(message)
    return store


def gather_failures(dist: Any, store: OutputStore, failure: BaseException | None,
                    local: int, resumed: int) -> list[tuple[str | None, int, int]]:
    """Every process's (failure, parts it holds, parts kept from an earlier run), after
    its loop, failed or not (so that none waits on a dead one); raises this process's
    failure, or a :class:`~det_sdk.errors.StateError` naming another's. A failed run
    gives up the output's lock (:data:`LOCK`) here."""
    results: list[tuple[str | None, int, int]] = dist.allgather(
        (repr(failure) if failure else None, local, resumed))
    if failure is not None or any(e for e, _, _ in results):
        store.release()  # the run is over: the output is free for the next one
    if failure is not None:
        raise failure
    failed = [(r, e) for r, (e, _, _) in enumerate(results) if e]
    if failed:
        raise StateError(f"context.predict: process {failed[0][0]} failed ({failed[0][1]}); "
                         f"the parts written in {store.location} stay valid: run again to "
                         "finish them")
    return results


class StopAsked:
    """Whether a streamed predict stops after a step because the master asked the task
    to stop (``det job pause``, a preemption): the parts written are the progress, and a
    run into the same output resumes after them.

    One process reads the master's request after every step. N processes meet every
    ``SYNC_STEPS`` steps (a collective of the chief's flag): all stop after the same step,
    so each process must walk the same steps (batches it has none of included). A
    process that failed walks on to the next meeting without predicting, where every
    process ends (``failed``): none is left waiting in a collective the failed one
    never joins.

    ``preempt``: the task's ``core_context.preempt`` (its ``requested()``: the chief's
    answer is the master's, the others' False).

    >>> class Dist: size, is_chief = 1, True
    >>> class Asked:
    ...     def requested(self): return True
    >>> StopAsked(Dist(), Asked()).after(0)
    True
    """

    SYNC_STEPS = 10

    def __init__(self, dist: Any, preempt: Any) -> None:
        self.dist, self.preempt = dist, preempt
        self.carried: list[Any] = []  # what each process brought to the last meeting
        self.asked = False  # the master asked (not: a process failed)

    def meets(self, step: int) -> bool:
        """Whether the processes meet after ``step`` (always, for one process)."""
        return self.dist.size == 1 or (step + 1) % self.SYNC_STEPS == 0

    def after(self, step: int, failed: bool = False, carry: Any = None) -> bool:
        """After step ``step`` (0, 1, ...): True on every process when to stop, asked by
        the master or because a process has ``failed``. ``carry``: this process's share
        of what the meeting gathers (``carried``: every process's, by rank)."""
        if self.dist.size == 1:
            self.asked, self.carried = bool(self.preempt.requested()), [carry]
            return failed or self.asked
        if not self.meets(step):
            return False
        flags = self.dist.allgather((bool(self.preempt.requested())
                                     if self.dist.is_chief else False, failed, carry))
        self.asked, self.carried = bool(flags[0][0]), [c for _, _, c in flags]
        return self.asked or any(f for _, f, _ in flags)


class PartWriter:
    """Writes parts on a thread, a bounded number of batches behind the predictions: the
    disk writes overlap the next batches' predictions, memory holds ``depth`` batches."""

    def __init__(self, store: OutputStore, depth: int = 2) -> None:
        self.store = store
        self.rows = 0
        self.error: BaseException | None = None
        self._q: queue.Queue[tuple[int, Any] | None] = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._run, daemon=True, name="det-predict-write")
        self._thread.start()

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            if self.error is None:
                try:
                    self.rows += self.store.write_part(*item)
                except BaseException as err:  # re-raised on the main thread
                    self.error = err

    def put(self, index: int, outputs: Any) -> None:
        """Queue global batch ``index``'s outputs (waits while ``depth`` are queued);
        raises the writer's error, once it has one."""
        if self.error is not None:
            raise self.error
        self._q.put((index, outputs))

    def close(self) -> None:
        """Write what is queued, make it durable and stop; raises the writer's error."""
        self._q.put(None)
        self._thread.join()
        if self.error is None:
            try:  # each process's own parts (another machine's, on a shared filesystem)
                self.store.sync()
            except OSError as err:
                self.error = disk_full(err, Path(self.store.location),
                                        "the parts (flushing them)")
        if self.error is not None:
            raise self.error
