"""A task's processes that left its process group (``setsid``, a daemon's double fork, a
kernel started in a session of its own): found by the environment every process of the
task inherits (``DET_ALLOCATION_ID``), so that killing the task kills them too, as
Determined's container took every process of the task with it.

The search is bounded: at most :data:`MAX_SECONDS` of reading the processes' environments
(this account's; another account's cannot be read, and is not the task's).

>>> task_strays("no-such-allocation-0", 0)
[]
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time

__all__ = ["MAX_SECONDS", "signal_strays", "task_strays"]

log = logging.getLogger("det_sdk.master.resources")

#: the longest one search of the processes may take
MAX_SECONDS = 5.0


def task_strays(alloc_id: str, group: int) -> list[int]:
    """The pids of allocation ``alloc_id``'s processes outside its process group
    ``group`` (the group itself is signalled as a whole)."""
    import psutil

    found = []
    deadline = time.monotonic() + MAX_SECONDS
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if time.monotonic() > deadline:
            log.warning("allocation %s: the search for its processes was cut at %.0f s",
                        alloc_id, MAX_SECONDS)
            break
        if proc.pid == me:
            continue
        try:
            if proc.environ().get("DET_ALLOCATION_ID") != alloc_id:
                continue
            if os.getpgid(proc.pid) == group:
                continue
        except (psutil.Error, OSError):
            continue  # gone, or another account's
        found.append(proc.pid)
    return found


def signal_strays(alloc_id: str, group: int, sig: signal.Signals) -> list[int]:
    """Send ``sig`` to each of the allocation's processes outside ``group``; their pids."""
    pids = task_strays(alloc_id, group)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    if pids:
        log.info("allocation %s: %s to %d process(es) outside its group", alloc_id,
                 sig.name, len(pids))
    return pids
