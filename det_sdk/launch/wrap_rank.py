"""Run one worker with its rank in front of every line it prints: Determined's
``wrap_rank``.

::

    python3 -m det_sdk.launch.wrap_rank RANK [--] python3 train.py
    python3 -m determined.launch.wrap_rank RANK -- python3 train.py   # the same

A launcher that starts a node's workers itself (Determined's Core API tutorial does)
wraps each in this, so the trial's log tells the workers apart: every line of the
worker's standard output and error comes out as ``[rank=RANK] line`` on the same
stream. SIGTERM and SIGINT are passed on to the worker; the exit status is the
worker's (128+N when signal N killed it).

>>> _prefix(3)
b'[rank=3] '
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import BinaryIO

__all__ = ["main"]


def _prefix(rank: int | str) -> bytes:
    return f"[rank={rank}] ".encode()


def _pump(src: BinaryIO, dst: BinaryIO, prefix: bytes) -> None:
    for line in iter(src.readline, b""):
        dst.write(prefix + line)
        dst.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``RANK [--] COMMAND...``; returns COMMAND's exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[1:2] == ["--"]:
        args = args[:1] + args[2:]
    if len(args) < 2 or not args[0].lstrip("-").isdigit():
        print("usage: python -m det_sdk.launch.wrap_rank RANK [--] COMMAND...", file=sys.stderr)
        return 2
    prefix = _prefix(args[0])
    try:
        proc = subprocess.Popen(args[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as err:
        print(f"det_sdk.launch.wrap_rank: cannot run {args[1]!r}: {err}", file=sys.stderr)
        return 127

    def forward(signum: int, frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, sys.stdout.buffer, prefix)),
             threading.Thread(target=_pump, args=(proc.stderr, sys.stderr.buffer, prefix))]
    for t in pumps:
        t.start()
    code = proc.wait()
    for t in pumps:
        t.join()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
