"""A rank whose launcher is gone stops: it never trains on unbounded.

``torchrun``'s workers are not in its process group: a SIGKILL of the launcher's group
(a scheduler's kill, a terminal closed with ``kill -9 -PGID``) leaves them training
against each other for as long as their collectives meet (measured here: still alive
30 s later, sleeping or training). ``horovodrun``'s ranks end within a moment (its
middleman watches the launcher), and the master ends a trial's whole group.

:func:`watch_launcher` notes the rank's parent (its launcher) and, on a daemon thread,
looks once a second; once the parent is gone (the rank was handed to another parent)
it sends the rank SIGTERM, which det_sdk takes as a stop request (a checkpoint at the
next batch, every rank agreeing, then an exit), and ends the process if it still runs
``grace_s`` later (a rank stuck in a collective its peers never join).

>>> # in a rank, as its distributed context starts (det_sdk.pytorch under torchrun):
>>> callable(watch_launcher)  # watch_launcher(grace_s=60.0)
True
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

__all__ = ["watch_launcher"]

log = logging.getLogger("det_sdk")

_started: set[int] = set()  # pids already watched (one watcher a process)


def watch_launcher(grace_s: float = 60.0, period_s: float = 1.0) -> bool:
    """Stop this process once its parent (the launcher) is gone; True if watching.

    Nothing is watched where the parent is already init (pid 1: nothing to lose), or
    twice in one process."""
    parent, me = os.getppid(), os.getpid()
    if parent <= 1 or me in _started:
        return me in _started
    _started.add(me)
    threading.Thread(target=_watch, args=(parent, grace_s, period_s),
                     name="det_sdk-launcher-watch", daemon=True).start()
    return True


def _watch(parent: int, grace_s: float, period_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(period_s)
    log.error("det_sdk: this rank's launcher (process %d) is gone: stopping (a checkpoint "
              "at the next batch), and ending in %.0f s at the latest", parent, grace_s)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    log.error("det_sdk: still running %.0f s after the launcher ended: exiting", grace_s)
    logging.shutdown()
    os._exit(1)
