"""Object collectives over TCP around the chief: no Horovod, torch or TensorFlow needed.

The chief (rank 0) listens on one port and holds one connection per other rank; an
allgather is every worker sending its object and the chief sending back the list in
rank order, a broadcast is the chief sending its object. Objects travel pickled, so a
peer is admitted only after it shows the training's token in a fixed-size plain-bytes
hello that is compared before anything is unpickled.

A peer that dies closes its socket (the kernel does it, even on ``kill -9``) and the
others' next collective raises :class:`CollectiveError` instead of waiting; keepalive
catches a peer whose machine vanished.

>>> star = Star.chief("127.0.0.1", 0, size=1, token="", timeout_s=1)
>>> star.allgather("x")
['x']
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import pickle
import socket
import struct
import time
from typing import Any

from det_sdk.errors import DetSdkError

__all__ = ["CollectiveError", "Star", "bind_address"]

log = logging.getLogger("det_sdk.core")

_MAGIC = b"DETSDK-STAR-1"
_HELLO = struct.Struct("!13sIH")  # magic, rank, token length; then the token's bytes
_MAX_TOKEN = 1024


class CollectiveError(DetSdkError, ConnectionError):
    """A rank could not be reached, was refused, or went away during a collective."""


def bind_address(chief_ip: str | None) -> str:
    """Where the chief listens: loopback for a loopback chief_ip, else every interface
    (``chief_ip`` may be a name or an address other ranks reach it by)."""
    loopback = chief_ip in (None, "localhost") or str(chief_ip).startswith("127.")
    return "127.0.0.1" if loopback else ""


def _keepalive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small objects, answered


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise CollectiveError("det_sdk: another rank went away during a collective "
                                  "(it stopped or failed; its own log says why)")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> Any:
    (n,) = struct.unpack("!Q", _recv_exact(sock, 8))
    return pickle.loads(_recv_exact(sock, n))  # admitted peers only (token checked)


class Star:
    """This rank's end of the collectives: the chief's listening side or a worker's link.

    Build it with :meth:`chief` (rank 0) or :meth:`worker` (the others)::

        star = Star.chief("0.0.0.0", 12360, size=2, token="t", timeout_s=300)
        star = Star.worker("10.0.0.1", 12360, rank=1, token="t", timeout_s=300)
    """

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
        self._peers: dict[int, socket.socket] = {}  # the chief's, by rank
        self._chief: socket.socket | None = None  # a worker's

    @staticmethod
    def listen(bind: str, port: int = 0) -> socket.socket:
        """The chief's listening socket on ``bind:port`` (0: a free port the kernel picks).

        A launcher that publishes the port itself binds first and publishes
        ``sock.getsockname()[1]`` after: no other process can take the port in between,
        which a port found free and bound later allows (two trials on one host did).
        """
        try:
            return socket.create_server((bind, port), reuse_port=False)
        except OSError as err:
            raise CollectiveError(f"det_sdk: the chief cannot listen on {bind or '*'}:{port} "
                                  f"for collectives: {err}") from None

    @classmethod
    def chief(cls, bind: str, port: int, *, size: int, token: str,
              timeout_s: float, server: socket.socket | None = None) -> Star:
        """Listen on ``bind:port`` (or on ``server``, already listening: :meth:`listen`)
        and admit ``size - 1`` workers showing ``token``."""
        star = cls(0, size)
        if size == 1:
            if server is not None:
                server.close()
            return star
        if server is None:
            server = cls.listen(bind, port)
        else:
            port = server.getsockname()[1]
        deadline = time.monotonic() + timeout_s
        with server:
            while len(star._peers) < size - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [r for r in range(1, size) if r not in star._peers]
                    star.close()
                    raise CollectiveError(
                        f"det_sdk: {len(missing)} of {size - 1} other ranks did not connect "
                        f"to the chief's port {port} within {timeout_s:.0f} s (missing: "
                        f"rank{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(map(str, missing))})")
                server.settimeout(left)
                try:
                    conn, peer = server.accept()
                except TimeoutError:
                    continue
                rank = star._admit(conn, token)
                if rank is None:
                    log.warning("det_sdk: refused a collective connection from %s (not this "
                                "training's hello or token)", peer[0])
                    conn.close()
                    continue
                _keepalive(conn)
                star._peers[rank] = conn
        return star

    def _admit(self, conn: socket.socket, token: str) -> int | None:
        conn.settimeout(10)
        try:
            magic, rank, n = _HELLO.unpack(_recv_exact(conn, _HELLO.size))
            if magic != _MAGIC or n > _MAX_TOKEN:
                return None
            shown = _recv_exact(conn, n)
        except (OSError, struct.error, CollectiveError):
            return None
        if not hmac.compare_digest(shown, token.encode()) or not 0 < rank < self.size \
                or rank in self._peers:
            return None
        conn.settimeout(None)
        _send(conn, "ok")
        return int(rank)

    @classmethod
    def worker(cls, host: str, port: int, *, rank: int, size: int, token: str,
               timeout_s: float) -> Star:
        """Connect to the chief at ``host:port`` (retrying until it listens)."""
        star = cls(rank, size)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise CollectiveError(
                        f"det_sdk: rank {rank} could not reach the chief's collectives at "
                        f"{host}:{port} within {timeout_s:.0f} s (is chief_ip right, and the "
                        "port open between the hosts?)") from None
                time.sleep(0.1)
        raw = token.encode()
        try:
            sock.sendall(_HELLO.pack(_MAGIC, rank, len(raw)) + raw)
            sock.settimeout(timeout_s)
            answer = _recv(sock)
        except (OSError, CollectiveError):
            answer = None
        if answer != "ok":
            sock.close()
            raise CollectiveError(f"det_sdk: the chief at {host}:{port} refused rank {rank} "
                                  "(another training's port, or a different token)")
        sock.settimeout(None)
        _keepalive(sock)
        star._chief = sock
        return star

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        if self.rank == 0:
            parts = [obj] + [_recv(self._peers[r]) for r in range(1, self.size)]
            for r in range(1, self.size):
                _send(self._peers[r], parts)
            return parts
        assert self._chief is not None, "closed"
        _send(self._chief, obj)
        return _recv(self._chief)

    def broadcast(self, obj: Any) -> Any:
        """The chief's ``obj`` on every rank."""
        if self.size == 1:
            return obj
        if self.rank == 0:
            for r in range(1, self.size):
                _send(self._peers[r], obj)
            return obj
        assert self._chief is not None, "closed"
        return _recv(self._chief)

    def close(self) -> None:
        """Close the connections."""
        for s in [*self._peers.values(), *([self._chief] if self._chief else [])]:
            with contextlib.suppress(OSError):
                s.close()
        self._peers.clear()
        self._chief = None
