"""A heartbeat in a process of its own: how long the machine itself stalled.

A latency test on a shared 2-core machine cannot tell "the master blocked" from "the
machine froze" (a virtual machine's host takes its CPUs away, the kernel stalls on
reclaim): both show as one slow answer. A separate process that only sleeps 5 ms and
writes the time does not share the master's interpreter, locks or event loop, so a gap
in its beats is the machine's, and the part of an answer that overlaps such a gap is
not the master's doing. ``CLOCK_MONOTONIC`` is one clock for every process on Linux,
so its beats and the test's ``time.monotonic()`` compare directly.

>>> with Heartbeat() as beat:
...     t0 = time.monotonic(); time.sleep(0.05); t1 = time.monotonic()
>>> 0.0 <= beat.stalled(t0, t1) < 0.05
True
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["Heartbeat"]

PERIOD_S = 0.005
# a gap longer than this is a stall: ten periods (a loaded scheduler delays a sleeper a
# few ms; a frozen machine, seconds)
STALL_S = 0.050

_BEATER = (
    "import sys, time\n"
    "out = open(sys.argv[1], 'w', buffering=1)\n"
    "while True:\n"
    f"    out.write(repr(time.monotonic()) + '\\n'); time.sleep({PERIOD_S})\n"
)


class Heartbeat:
    """Beats in a child process from ``__enter__`` to ``__exit__``; :meth:`stalled`
    reads them after the block."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="heartbeat-")
        self._file = Path(self._dir.name) / "beats"
        self._proc: subprocess.Popen[bytes] | None = None
        self._kept: list[float] | None = None  # the beats, read once the child is gone

    def __enter__(self) -> Heartbeat:
        self._proc = subprocess.Popen([sys.executable, "-c", _BEATER, str(self._file)])
        deadline = time.monotonic() + 60
        # the child's interpreter takes a moment to start
        while not self._file.exists() or not self._file.stat().st_size:
            if time.monotonic() > deadline:
                raise TimeoutError("the heartbeat process wrote nothing within 60 s")
            time.sleep(PERIOD_S)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        self._proc.kill()
        self._proc.wait(30)
        self._kept = [float(x) for x in self._file.read_text().splitlines()
                      if x.endswith(tuple("0123456789"))]  # the last may be cut short
        self._dir.cleanup()

    def _beats(self) -> list[float]:
        if self._kept is None:
            raise RuntimeError("Heartbeat: read the beats after the with block")
        return self._kept

    def stalled(self, t0: float, t1: float) -> float:
        """Seconds of ``[t0, t1]`` inside gaps of the beats longer than ``STALL_S``: the
        time the machine, not the code under test, took from that interval."""
        beats = self._beats()
        total = 0.0
        for a, b in itertools.pairwise(beats):
            if b - a > STALL_S:
                total += max(0.0, min(b, t1) - max(a, t0))
        return total

    def worst_gap(self) -> float:
        """The longest gap between two beats (for a failure's message)."""
        beats = self._beats()
        return max((b - a for a, b in itertools.pairwise(beats)), default=0.0)
