"""The master's slow disk work (keeping a task's files, deleting its working directory),
done in order by one thread of its own: never on the HTTP event loop, never under the
lifecycle lock. Copying 50,000 files took the master's answers away for 90 s when it ran
under the lock that the report routes take (issue 46).

>>> work = DiskWork()
>>> done = []
>>> work.submit("append", done.append, 1)
>>> work.wait_idle(5.0), done
(True, [1])
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DiskWork"]

log = logging.getLogger("det_sdk.master.disk_work")


class DiskWork:
    """A queue of disk jobs and the daemon thread that runs them (started on the first)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, Callable[..., Any], tuple[Any, ...]]] = \
            queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._idle = threading.Condition()
        self._pending = 0

    def submit(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the disk thread, after what was submitted before."""
        with self._idle:
            self._pending += 1
        self._queue.put((what, fn, args))
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="master-disk-work")
                self._thread.start()

    def wait_idle(self, timeout: float) -> bool:
        """Whether everything submitted was done within ``timeout`` seconds."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _run(self) -> None:
        while True:
            what, fn, args = self._queue.get()
            try:
                fn(*args)
            except Exception:  # the thread must outlive one failed job
                log.exception("disk work failed: %s", what)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()
