"""Checkpoints written off the training path: one background writer, one write at a time.

At a checkpoint the loop takes a :class:`~det_sdk.keras._checkpoint.Snapshot`
(milliseconds: tensors that share the variables' buffers, copy on write) and
hands the writing to this writer; training goes on while it streams the arrays
to disk with the storage's atomicity (temporary name, fsync, rename). A new
checkpoint first waits for the previous write, so at most one snapshot is in
flight (its memory: one copy of the model's and optimizers' state, made by
TensorFlow as training updates the variables). A stop (pause, preemption, end of
training, SIGTERM) waits for the last write before it reports and exits. A write
that failed raises :class:`CheckpointWriteError` in the training thread at the
next checkpoint or wait: never a silently missing checkpoint.

>>> writer = CheckpointWriter()
>>> writer.submit(lambda: None)
>>> writer.wait()
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

from det_sdk.errors import DetSdkError

__all__ = ["CheckpointWriteError", "CheckpointWriter"]


class CheckpointWriteError(DetSdkError, RuntimeError):
    """A checkpoint could not be written (disk full, permissions, ...)."""


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
    """Runs checkpoint writes in a background thread, one at a time."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def busy(self) -> bool:
        """True while a write is running."""
        return self._thread is not None and self._thread.is_alive()

    def submit(self, write: Callable[[], None]) -> None:
        """Start ``write()`` in the background, after the previous write has finished."""
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(write,), daemon=True,
                                        name="det_sdk-checkpoint-writer")
        self._thread.start()

    def wait(self) -> None:
        """Block until no write runs; raise the error of a write that failed."""
        if self._thread is not None:
            if self._thread.is_alive() and self._thread.native_id is not None:
                _set_priority(self._thread.native_id, 0)
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise CheckpointWriteError(f"det_sdk: a checkpoint could not be written: {error}"
                                       ) from error

    def _run(self, write: Callable[[], None]) -> None:
        _set_priority(threading.get_native_id(), 10)
        try:
            write()
        except BaseException as err:  # reported to the training thread by wait()
            self._error = err
