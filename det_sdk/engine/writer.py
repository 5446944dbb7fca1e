"""Checkpoints written off the training path: a background writer, one write at a time,
and a publisher behind it, one upload at a time.

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

A write may return what finishes it (storing a staged folder: an upload to a bucket,
then the report). That runs in a second thread, in order, one at a time, and the
snapshot is dropped before it starts: the next checkpoint waits only for the previous
one's local write, not for its upload. A write whose finish must wait for the one
before it waits in the writer's thread, so at most one checkpoint is uploading and one
is staged behind it.

>>> writer = CheckpointWriter()
>>> writer.submit(lambda: None)
>>> writer.submit(lambda: (lambda: None))  # written, then finished in the publisher
>>> writer.wait()
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

from det_sdk.errors import CheckpointWriteError

__all__ = ["CheckpointWriteError", "CheckpointWriter", "Write"]

#: a checkpoint's write: returns what finishes it (run after it, in order, in the
#: publisher's thread), or anything not callable (None) when done
Write = Callable[[], "Callable[[], None] | None"]


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
    """Runs checkpoint writes in one background thread, one at a time, and what finishes
    them in a second, one at a time, in order.

    The threads are started at the first write and kept (starting one per write cost
    0.4 ms of the training thread's time at each checkpoint); they are daemons, and
    whoever needs a checkpoint stored waits for it (:meth:`wait`).
    """

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._threads: dict[str, threading.Thread] = {}
        self._job: Write | None = None  # handed over to the writer, not yet taken
        self._running = False  # a write is under way (or handed over)
        self._finish: Callable[[], None] | None = None  # handed over to the publisher
        self._finishing = False  # a finish is under way (or handed over)
        self._error: BaseException | None = None  # the first failure, until raised

    @property
    def busy(self) -> bool:
        """True while a write or its finish is running."""
        with self._ready:
            return self._running or self._finishing

    def submit(self, write: Write) -> None:
        """Start ``write()`` in the background, after the previous write (not its finish)
        has ended."""
        self._wait(lambda: self._running)
        with self._ready:
            self._job, self._running = write, True
            self._start("det_sdk-checkpoint-writer", self._serve)
            self._ready.notify_all()

    def wait(self) -> None:
        """Block until every write and finish has ended; raise the error of one that failed."""
        self._wait(lambda: self._running or self._finishing)

    def _wait(self, pending: Callable[[], bool]) -> None:
        with self._ready:
            if pending():
                for thread in self._threads.values():  # training waits: the critical path
                    if thread.native_id is not None:
                        _set_priority(thread.native_id, 0)
                while pending():
                    self._ready.wait()
            error, self._error = self._error, None
        if error is not None:
            raise CheckpointWriteError(f"det_sdk: a checkpoint could not be written: {error}"
                                       ) from error

    def _start(self, name: str, target: Callable[[], None]) -> None:
        thread = self._threads.get(name)
        if thread is None or not thread.is_alive():
            self._threads[name] = threading.Thread(target=target, daemon=True, name=name)
            self._threads[name].start()

    def _failed(self, error: BaseException) -> None:
        if self._error is None:  # the first: what the training thread is told
            self._error = error

    def _serve(self) -> None:
        native_id = threading.get_native_id()
        while True:
            with self._ready:
                while self._job is None:
                    self._ready.wait()
                write, self._job = self._job, None
            _set_priority(native_id, 10)
            finish: Callable[[], None] | None = None
            error: BaseException | None = None
            try:
                result = write()
                finish = result if callable(result) else None  # what else returns: ignored
            except BaseException as err:  # reported to the training thread by wait()
                error = err
            # drop the snapshot now: kept until the next job, it would hold a copy of
            # the whole training state for nothing
            del write
            with self._ready:
                if finish is not None:
                    while self._finishing:  # one upload at a time, in order
                        self._ready.wait()
                    self._finish, self._finishing = finish, True
                    self._start("det_sdk-checkpoint-publisher", self._publish)
                if error is not None:
                    self._failed(error)
                self._running = False
                self._ready.notify_all()

    def _publish(self) -> None:
        native_id = threading.get_native_id()
        while True:
            with self._ready:
                while self._finish is None:
                    self._ready.wait()
                finish, self._finish = self._finish, None
            _set_priority(native_id, 10)
            error: BaseException | None = None
            try:
                finish()
            except BaseException as err:
                error = err
            del finish
            with self._ready:
                if error is not None:
                    self._failed(error)
                self._finishing = False
                self._ready.notify_all()
