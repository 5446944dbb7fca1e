"""SIGTERM and Ctrl-C during training: a request to stop cleanly, not an exit.

Every front's fit runs inside :func:`catch_stop_signals` and asks the function it yields
at the points where it can stop (after a batch): it checkpoints there, then stops. A
second Ctrl-C interrupts at once, as usual.

>>> with catch_stop_signals() as stop_signal:
...     stop_signal() is None
True
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["MASTER_STOP", "catch_stop_signals"]

#: Why a fit stopped when the master asked (``det experiment pause`` or ``kill``): read
#: as "stopped by ..." in the message a stopped script prints.
MASTER_STOP = "the master (pause or kill)"

_SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}


@contextmanager
def catch_stop_signals() -> Iterator[Callable[[], str | None]]:
    """While inside, SIGTERM and Ctrl-C ask training to stop after the current batch.

    Yields a function that returns the signal's name once one arrived. A second
    Ctrl-C interrupts at once, as usual. Outside the main thread nothing is caught
    (Python delivers signals to the main thread only).
    """
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def handler(signum: int, frame: Any) -> None:
        if received and signum == signal.SIGINT:
            raise KeyboardInterrupt
        received.append(_SIGNAL_NAMES[signal.Signals(signum)])

    previous = {s: signal.signal(s, handler) for s in _SIGNAL_NAMES}
    try:
        yield lambda: received[0] if received else None
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
