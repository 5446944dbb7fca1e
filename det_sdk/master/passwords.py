"""Users' passwords, kept as memory-hard hashes, and the limit on sign-in attempts.

The hash is scrypt from Python's standard library (``hashlib.scrypt``, OpenSSL's):
memory-hard like argon2, and nothing to install or keep up to date beyond Python and
OpenSSL themselves (argon2-cffi would be one more compiled dependency of the master).
The parameters (n=2**14, r=8, p=1: 16 MiB and tens of milliseconds a hash) are
OWASP's minimum for scrypt; they are stored with each hash, so stronger ones later
still verify the older hashes.

:class:`SignInLimiter`: after ``max_failures`` wrong passwords for one user name (or
``max_address_failures`` from one address) within ``window`` seconds, further attempts
for it are refused at once (no hash computed: a flood costs the master nothing) until
the window has passed since the last counted failure. Attempts refused while locked do
not count, so the right password works again one window after the flood stops.

>>> stored = hash_password("correct horse")
>>> stored.startswith("scrypt$16384$8$1$")
True
>>> verify_password("correct horse", stored), verify_password("wrong", stored)
(True, False)
>>> clock = [0.0]
>>> limiter = SignInLimiter(max_failures=2, window=10, clock=lambda: clock[0])
>>> limiter.failed("ann", "10.0.0.1"); limiter.failed("ann", "10.0.0.1")
>>> limiter.locked("ann", "10.0.0.1") > 0
True
>>> clock[0] = 10.5
>>> limiter.locked("ann", "10.0.0.1")
0.0
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from det_sdk.env import setting

__all__ = ["MIN_PASSWORD_LENGTH", "SIGNIN_WINDOW_ENV", "SignInLimiter", "hash_password",
           "password_problem", "verify_password"]

_N, _R, _P = 2**14, 8, 1
_MAXMEM = 64 * 1024 * 1024  # OpenSSL's default cap (32 MiB) is too close to 16 MiB's needs
#: a new password's least length (Determined 0.38's complexity rule asks 8 too)
MIN_PASSWORD_LENGTH = 8
#: the longest password taken: scrypt's cost does not grow with it, but a body may
MAX_PASSWORD_LENGTH = 1024
#: the environment variable that sets the sign-in lockout window (seconds) of a master
SIGNIN_WINDOW_ENV = "DET_SIGNIN_WINDOW"
# at most this many scrypt hashes at once (16 MiB each): a burst of sign-ins from many
# addresses waits instead of taking the master's memory
_HASHING = threading.BoundedSemaphore(4)


def password_problem(password: object) -> str | None:
    """What is wrong with ``password`` as a new password (None: nothing).

    >>> password_problem("short")
    'password: expected at least 8 characters, got 5'
    >>> password_problem("long enough") is None
    True
    """
    if not isinstance(password, str):
        return "password: expected a string"
    if len(password) < MIN_PASSWORD_LENGTH:
        return (f"password: expected at least {MIN_PASSWORD_LENGTH} characters, "
                f"got {len(password)}")
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"password: expected at most {MAX_PASSWORD_LENGTH} characters"
    return None


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    with _HASHING:
        return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=_MAXMEM,
                              dklen=32)


def hash_password(password: str) -> str:
    """``password`` as stored: ``scrypt$n$r$p$salt$hash`` (salt and hash base64)."""
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, _N, _R, _P)
    b64 = base64.b64encode
    return f"scrypt${_N}${_R}${_P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_password(password: str, stored: str | None) -> bool:
    """Whether ``password`` is the one ``stored`` was made from (None: no password set,
    nothing matches). Compared in constant time."""
    if not stored or len(password) > MAX_PASSWORD_LENGTH:
        return False
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        got = _scrypt(password, base64.b64decode(salt), int(n), int(r), int(p))
    except ValueError:
        return False
    return hmac.compare_digest(got, base64.b64decode(digest))


def signin_window() -> float:
    """The lockout window of this master: ``DET_SIGNIN_WINDOW`` seconds, else 60.

    >>> signin_window() > 0
    True
    """
    raw = setting(SIGNIN_WINDOW_ENV) or ""
    try:
        value = float(raw) if raw else 60.0
    except ValueError:
        value = 60.0
    return value if value > 0 else 60.0


class SignInLimiter:
    """Counts wrong passwords per user name and per client address (see the module)."""

    #: the most keys remembered: the oldest are forgotten past it (bounded memory)
    MAX_KEYS = 100_000

    def __init__(self, max_failures: int = 10, max_address_failures: int = 50,
                 window: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max = {"user": max_failures, "addr": max_address_failures}
        self.window = signin_window() if window is None else window
        self._clock = clock
        self._lock = threading.Lock()
        self._fails: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def _recent(self, key: tuple[str, str], now: float) -> deque[float]:
        times = self._fails.get(key)
        if times is None:
            return deque()
        while times and now - times[0] >= self.window:
            times.popleft()
        if not times:
            del self._fails[key]
        return times

    def locked(self, username: str, address: str) -> float:
        """Seconds until attempts for ``username`` from ``address`` are taken again
        (0: now)."""
        now = self._clock()
        wait = 0.0
        with self._lock:
            for key in (("user", username.lower()), ("addr", address)):
                times = self._recent(key, now)
                if len(times) >= self.max[key[0]]:
                    wait = max(wait, self.window - (now - times[-1]))
        return wait

    def failed(self, username: str, address: str) -> None:
        """Count one wrong password (or unknown user) for both keys."""
        now = self._clock()
        with self._lock:
            for key in (("user", username.lower()), ("addr", address)):
                times = self._fails.setdefault(key, deque(maxlen=self.max[key[0]]))
                times.append(now)
                self._fails.move_to_end(key)
            while len(self._fails) > self.MAX_KEYS:
                self._fails.popitem(last=False)

    def succeeded(self, username: str) -> None:
        """The user's count starts again (the address's does not: one address trying
        many names is what it counts)."""
        with self._lock:
            self._fails.pop(("user", username.lower()), None)
