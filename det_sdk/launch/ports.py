"""Ports named before anything listens on them: outside the kernel's ephemeral range.

A launcher often has to name a port that another process binds later (TensorFlow's
gRPC server from ``TF_CONFIG``, torch's store at ``MASTER_PORT``, a master started by
a test). A port that ``bind(("", 0))`` found free comes from the kernel's ephemeral
range (``/proc/sys/net/ipv4/ip_local_port_range``), the range that every outgoing
connection on the host also takes its local port from: in the seconds before the
listener binds (TensorFlow's import alone takes several), any connection may take it,
and the listener fails with "Address already in use" (a CI run did, on the chief's
collectives port).

:func:`unused_port` names a port below that range, which the kernel never hands out by
itself, that binds now, and that no other caller on this host named in the last
:data:`HELD_S` seconds (a small locked file in the temporary directory remembers them;
where it cannot be written, the choice is random among some twenty thousand ports).
Where the launcher can listen itself and hand the socket down, it does that instead
(``det_sdk.core._star.Star.listen``): no port to name at all.

>>> port = unused_port()
>>> 1024 <= port < ephemeral_range()[0] or ephemeral_range()[0] <= 11024
True
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from det_sdk.errors import DetSdkError, UsageError

__all__ = ["HELD_S", "NoFreePortError", "ephemeral_range", "listening", "start_listening",
           "unused_port"]

#: how long a named port stays reserved for its listener (from naming to binding)
HELD_S = 300.0
#: the lowest port named: above the registered services most hosts run
_FLOOR = 10000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


class NoFreePortError(DetSdkError, OSError):
    """No port (with the offsets asked for) could be bound on the host."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral ports, ``(first, last)``; Linux's default elsewhere.

    >>> first, last = ephemeral_range()
    >>> 1024 <= first <= last <= 65535
    True
    """
    try:
        first, last = (int(v) for v in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return first, last


def _binds(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _named_recently() -> Iterator[set[int] | None]:
    """The ports named on this host in the last HELD_S s, locked; add to the set to
    record. None where the registry cannot be used (another user's file, no flock)."""
    path = Path(tempfile.gettempdir()) / f"det_sdk-named-ports-{os.getuid()}"
    try:
        import fcntl

        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except (ImportError, OSError):
        yield None
        return
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        now = time.time()
        held: dict[int, float] = {}
        for line in f.read().split("\n"):
            number, _, when = line.partition(" ")
            with contextlib.suppress(ValueError):
                if now - float(when) < HELD_S:
                    held[int(number)] = float(when)
        ports = set(held)
        yield ports
        for port in ports - set(held):
            held[port] = now
        f.seek(0)
        f.truncate()
        f.write("".join(f"{p} {t}\n" for p, t in held.items()))


def unused_port(host: str = "127.0.0.1", offsets: Sequence[int] = ()) -> int:
    """A port of ``host`` that binds now, outside the ephemeral range, named to no one else
    on this host lately; each ``port + offset`` for ``offsets`` binds too and is reserved
    with it (a server that takes several ports).

    ``host`` "" tests every interface. Where the ephemeral range leaves fewer than a
    thousand ports below it, the port is the kernel's pick (``bind(0)``) as before.

    >>> base = unused_port(offsets=[1, 2])
    >>> base + 2 < max(ephemeral_range()[0], 11024)
    True
    """
    span = max(offsets, default=0)
    if min(offsets, default=0) < 0:
        raise UsageError(f"unused_port: offsets must be >= 0, got {list(offsets)}")
    top = ephemeral_range()[0] - span
    with _named_recently() as named:
        taken = named if named is not None else set()
        tries = 500 if top - _FLOOR >= 1000 else 0  # else too few ports below the range
        for _ in range(tries):
            port = random.randrange(_FLOOR, top)
            group = [port, *(port + o for o in offsets)]
            if not taken.intersection(group) and all(_binds(host, p) for p in group):
                if named is not None:
                    named.update(group)
                return port
        if not tries and not offsets:
            with socket.socket() as s:
                s.bind((host, 0))
                return int(s.getsockname()[1])
    raise NoFreePortError(f"no free port on {host or 'every interface'} between {_FLOOR} and "
                          f"{top + span} (where ip_local_port_range starts) with offsets "
                          f"{list(offsets)}, after {tries} tries")


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port`` now.

    >>> listening(unused_port())
    False
    """
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_listening(launch: Callable[[int], subprocess.Popen[bytes]], seconds: float,
                    every: float = 0.1, tries: int = 5
                    ) -> tuple[subprocess.Popen[bytes], int] | None:
    """A server ``launch(port)`` starts, once it listens on 127.0.0.1: (its process, the
    port); None if no try listened within ``seconds``. The port is one the kernel found
    free just before: another process may take it before the server binds it, and the
    server then ends or never listens, so each try picks anew (killing a try that hangs).
    """
    for _ in range(tries):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        proc = launch(port)
        deadline = time.monotonic() + seconds
        while proc.poll() is None and time.monotonic() < deadline:
            if listening(port):
                return proc, port
            time.sleep(every)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return None
