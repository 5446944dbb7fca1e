"""Checkpoints written off the training path: one background writer, one write at a time.

At a checkpoint the training loop takes a snapshot of the training state (for
Keras, :class:`~det_sdk.keras._checkpoint.Snapshot`: milliseconds, tensors that
share the variables' buffers, copy on write) and hands the writing to this
writer; training goes on while it streams the arrays to disk with the storage's
atomicity (temporary name, fsync, rename). A new checkpoint first waits for the
previous write, so at most one snapshot is in flight (its memory: one copy of the
model's and optimizers' state). It imports no framework: every front (Keras,
PyTorch, det.core) uses it. A stop (pause, preemption, end of training, SIGTERM)
waits for the last write before it reports and exits. A write that failed raises
:class:`CheckpointWriteError` in the training thread at the next checkpoint or
wait: never a silently missing checkpoint.

>>> writer = CheckpointWriter()
>>> writer.submit(lambda: None)
>>> writer.wait()
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

from det_sdk.errors import CheckpointWriteError

__all__ = ["CheckpointWriteError", "CheckpointWriter"]


def _set_priority(native_id: int, nice: int) -> None:
    """Set one thread's nice value (on Linux a thread has its own); best effort.

    The write is mostly memory copies into the page cache and waiting on the disk;
    while training runs it should take what the training threads leave (nice 10).
    Once training waits for it, it is the critical path: back to nice 0 (allowed
    as root or with CAP_SYS_NICE; otherwise it stays at 10).
    """
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not permitted
        os.setpriority(os.PRIO_PROCESS, native_id, nice)


class CheckpointWriter:
    """Runs checkpoint writes in one background thread, one at a time.

    The thread is started at the first write and kept (starting one per write cost
    0.4 ms of the training thread's time at each checkpoint); it is a daemon, and
    whoever needs a write on disk waits for it (:meth:`wait`).
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._ready = threading.Condition()
        self._job: Callable[[], None] | None = None  # handed over, not yet taken
        self._running = False  # a write is under way (or handed over)
        self._error: BaseException | None = None

    @property
    def busy(self) -> bool:
        """True while a write is running."""
        with self._ready:
            return self._running

    def submit(self, write: Callable[[], None]) -> None:
        """Start ``write()`` in the background, after the previous write has finished."""
        self.wait()
        with self._ready:
            self._job, self._running = write, True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="det_sdk-checkpoint-writer")
                self._thread.start()
            self._ready.notify_all()

    def wait(self) -> None:
        """Block until no write runs; raise the error of a write that failed."""
        with self._ready:
            if self._running:
                thread = self._thread
                if thread is not None and thread.native_id is not None:
                    _set_priority(thread.native_id, 0)  # training waits: the critical path
                while self._running:
                    self._ready.wait()
            error, self._error = self._error, None
        if error is not None:
            raise CheckpointWriteError(f"det_sdk: a checkpoint could not be written: {error}"
                                       ) from error

    def _serve(self) -> None:
        native_id = threading.get_native_id()
        while True:
            with self._ready:
                while self._job is None:
                    self._ready.wait()
                write, self._job = self._job, None
            _set_priority(native_id, 10)
            error: BaseException | None = None
            try:
                write()
            except BaseException as err:  # reported to the training thread by wait()
                error = err
            # drop the snapshot now: kept until the next job, it would hold a copy of
            # the whole training state for nothing
            del write
            with self._ready:
                self._error, self._running = error, False
                self._ready.notify_all()
