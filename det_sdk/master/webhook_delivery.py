"""Delivering webhook events: signed POSTs sent by background workers, never by the
thread that raised the event (a state change under the master's lock, a task's report).

- **Signed as Determined signs**: headers ``X-Determined-AI-Signature-Timestamp`` (Unix
  seconds) and ``X-Determined-AI-Signature``, the hex HMAC-SHA256 of
  ``f"{timestamp},{body}"`` under the webhook's signing key (:func:`signature`).
- **Bounded**: each attempt has :data:`ATTEMPT_TIMEOUT_S` in all (connect, send, the
  answer's status line and headers), enforced by closing the socket at the deadline, so
  a URL that accepts the connection and never answers, or answers a byte a second, is
  cut. Redirects are not followed (a redirect loop is one answer: failed). The queue
  holds at most :data:`QUEUE_CAPACITY` deliveries; an event beyond it is recorded as
  failed, never waited for.
- **Retried with back-off**: a connection error, a timeout or a 5xx is tried again after
  :data:`BACKOFF_S` seconds, doubled each time, :data:`ATTEMPTS` attempts in all (as
  Determined: one and two retries); a 3xx or 4xx is final. A waiting retry holds no
  worker: it sits in a heap until it is due.

>>> signature("key", 1700000000, b'{"a": 1}')[:16]
'fbcfe127bace8a10'
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import hmac
import http.client
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["ATTEMPTS", "ATTEMPT_TIMEOUT_S", "BACKOFF_S", "QUEUE_CAPACITY", "Deliverer", "Job",
           "post_once", "signature", "signed_headers"]

log = logging.getLogger("det_sdk.master.webhooks")

ATTEMPTS = 3
ATTEMPT_TIMEOUT_S = 5.0
BACKOFF_S = 1.0
QUEUE_CAPACITY = 1000
WORKERS = 4
SIGNATURE_HEADER = "X-Determined-AI-Signature"
TIMESTAMP_HEADER = "X-Determined-AI-Signature-Timestamp"


def signature(key: str, timestamp: int, body: bytes) -> str:
    """Determined's webhook signature: hex HMAC-SHA256 of ``"<timestamp>,<body>"``.

    >>> len(signature("k", 1, b"{}"))
    64
    """
    message = f"{timestamp},".encode() + body
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def signed_headers(key: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """The headers of one signed POST of ``body`` (signed at ``now``, default: now).

    >>> sorted(signed_headers("k", b"{}", now=5))[0]
    'Content-Type'
    """
    t = int(time.time() if now is None else now)
    return {"Content-Type": "application/json; charset=UTF-8", TIMESTAMP_HEADER: str(t),
            SIGNATURE_HEADER: signature(key, t, body), "User-Agent": "det_sdk-webhooks"}


class _Attempt:
    """One POST whose socket is shut at its deadline (from a timer thread): every blocking
    read or write of http.client then returns at once."""

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.conn, self.cut = conn, False

    def shut(self) -> None:
        self.cut = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def post_once(url: str, body: bytes, headers: dict[str, str],
              timeout: float = ATTEMPT_TIMEOUT_S) -> tuple[int | None, str | None]:
    """POST ``body`` to ``url`` once, within ``timeout`` seconds in all: ``(status,
    None)`` for an answer (any status; redirects not followed), ``(None, why)`` when
    there was none.

    >>> post_once("http://127.0.0.1:9/", b"{}", {}, timeout=1)[0] is None
    True
    """
    parts = urlsplit(url)
    conn_class = (http.client.HTTPSConnection if parts.scheme == "https"
                  else http.client.HTTPConnection)
    conn = conn_class(parts.hostname or "", parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.username is not None:  # credentials in the URL: Basic auth, as Go's client sends
        import base64
        from urllib.parse import unquote

        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers = {**headers, "Authorization": f"Basic {base64.b64encode(pair).decode()}"}
    attempt = _Attempt(conn)
    timer = threading.Timer(timeout, attempt.shut)
    timer.daemon = True
    timer.start()
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read(1 << 16)  # a little of the answer, never all of a huge one
        return resp.status, None
    except (OSError, http.client.HTTPException, ValueError) as err:
        if attempt.cut or isinstance(err, TimeoutError | socket.timeout):
            return None, f"no answer within {timeout:g} s"
        return None, f"{type(err).__name__}: {err}"[:500]
    finally:
        timer.cancel()
        conn.close()


@dataclass
class Job:
    """One delivery: its record's id, where, what (``key``: the signing key)."""

    delivery_id: int
    url: str
    body: bytes
    key: str
    label: str  # for logs: the webhook's id and name, never its URL or key
    attempts: int = 0


#: ``record(delivery_id, state, attempts, status_code, error)``
Recorder = Callable[[int, str, int, "int | None", "str | None"], None]


def outcome(status: int | None, error: str | None) -> tuple[bool, bool, str | None]:
    """``(delivered, retry, error)`` of one attempt's result.

    >>> outcome(204, None), outcome(503, None)[:2], outcome(302, None)[:2]
    ((True, False, None), (False, True), (False, False))
    """
    if status is None:
        return False, True, error
    if 200 <= status < 300:
        return True, False, None
    if 300 <= status < 400:
        return False, False, f"answered {status}: redirects are not followed"
    if status >= 500:
        return False, True, f"answered {status}"
    return False, False, f"answered {status}"


class Deliverer:
    """:data:`WORKERS` threads sending :class:`Job` s, retried with back-off; each
    outcome goes to ``record``. ``attempts``, ``backoff`` and ``timeout``: the bounds
    above (tests may shorten them)."""

    def __init__(self, record: Recorder, *, attempts: int = ATTEMPTS,
                 backoff: float = BACKOFF_S, timeout: float = ATTEMPT_TIMEOUT_S,
                 capacity: int = QUEUE_CAPACITY, workers: int = WORKERS) -> None:
        self.record = record
        self.attempts, self.backoff, self.timeout = attempts, backoff, timeout
        self.capacity, self.workers = capacity, workers
        self._due: list[tuple[float, int, Job]] = []  # a heap by due time
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.workers):
            t = threading.Thread(target=self._work, daemon=True, name=f"det-webhooks-{i}")
            t.start()
            self._threads.append(t)

    def stop(self, wait: float = 1.0) -> None:
        """Stop the workers, waiting at most ``wait`` seconds in all (a master's stop is
        not held up by a URL that hangs: an attempt under way is abandoned, its worker a
        daemon); what is still queued or sending stays recorded as it is, and the next
        master marks it failed."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + wait
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def submit(self, job: Job) -> bool:
        """Queue ``job`` now; False (nothing queued) when :data:`QUEUE_CAPACITY`
        deliveries wait already."""
        with self._cond:
            if len(self._due) >= self.capacity:
                return False
            heapq.heappush(self._due, (time.monotonic(), next(self._seq), job))
            self._cond.notify()
            return True

    def pending(self) -> int:
        """Deliveries waiting (queued or for a retry), not counting those being sent."""
        with self._cond:
            return len(self._due)

    def _next(self) -> Job | None:
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                if self._due and self._due[0][0] <= now:
                    return heapq.heappop(self._due)[2]
                self._cond.wait(self._due[0][0] - now if self._due else None)
            return None

    def _work(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            try:
                self._attempt(job)
            except Exception:  # a bug here must not end the worker
                log.exception("webhook %s: delivery %d failed unexpectedly", job.label,
                              job.delivery_id)

    def _attempt(self, job: Job) -> None:
        job.attempts += 1
        status, error = post_once(job.url, job.body, signed_headers(job.key, job.body),
                                  self.timeout)
        delivered, retry, error = outcome(status, error)
        if delivered:
            self._record(job, "DELIVERED", status, None)
            return
        if retry and job.attempts < self.attempts:
            self._record(job, "SENDING", status, error)
            due = time.monotonic() + self.backoff * 2 ** (job.attempts - 1)
            with self._cond:
                heapq.heappush(self._due, (due, next(self._seq), job))
                self._cond.notify()
            return
        log.warning("webhook %s: delivery %d failed after %d attempt(s): %s", job.label,
                    job.delivery_id, job.attempts, error)
        self._record(job, "FAILED", status, error)

    def _record(self, job: Job, state: str, status: int | None, error: str | None) -> None:
        try:
            self.record(job.delivery_id, state, job.attempts, status, error)
        except Exception:  # the store may be closing with the master
            log.exception("webhook %s: the outcome of delivery %d was not recorded",
                          job.label, job.delivery_id)
