"""What every answer of the master carries for browsers, and the web UI's sessions.

``SecurityHeaders`` (pure ASGI, around the whole app) adds to every response:

- ``Content-Security-Policy``: scripts, styles, images and connections from the
  master's own origin only, no plugins, no ``<base>``, forms post to the master only,
  and ``frame-ancestors 'none'``: no other page (another port of 127.0.0.1 included,
  which is *same-site* for cookies) can frame the UI and have a click land on Kill;
- ``X-Frame-Options: DENY`` (the same, for browsers that predate CSP 2);
- ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer``.

``/docs`` (Swagger UI, loaded from its CDN by FastAPI) gets a policy of its own that
lets that CDN and the page's one inline script (by hash) in; it holds no data.

``Sessions``: the UI's cookie holds a random session id, never the user token. The
database keeps the id's SHA-256 only (reading the file hands out no working session).
A session ends after ``IDLE_SECONDS`` without a request, the user tokens' lifetime
(``ABSOLUTE_SECONDS`` unless `det master up --token-lifetime` says otherwise) after
sign-in, at sign-out (deleted server-side), or when the user token that opened it is
no longer known. Sessions live in the master's SQLite store, so a master restart keeps
them (within their lifetime).

>>> from det_sdk.master.store import Store
>>> clock = [1000.0]
>>> sessions = Sessions(Store(":memory:"), clock=lambda: clock[0])
>>> sessions.store.add_user_token("t0k")
>>> sid = sessions.create("t0k")
>>> sessions.valid(sid), sessions.valid("forged")
(True, False)
>>> clock[0] += IDLE_SECONDS + 1
>>> sessions.valid(sid)
False
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from det_sdk.master.store import Store, hash_token

__all__ = ["ABSOLUTE_SECONDS", "CSP", "IDLE_SECONDS", "SecurityHeaders", "Sessions",
           "docs_csp"]

IDLE_SECONDS = 12 * 3600  # a session unused this long is over
ABSOLUTE_SECONDS = 7 * 24 * 3600  # and any session this long after its sign-in
_TOUCH_EVERY = 60.0  # the stored last use is brought up to date at most this often
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


def docs_csp(html: str) -> str:
    """The policy of the Swagger UI page ``html``: its CDN, and its inline scripts by hash.

    >>> docs_csp("<script>go()</script>").split("; ")[1][:60]
    "script-src 'self' https://cdn.jsdelivr.net 'sha256-5KYv+PUbo"
    """
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in re.findall(r"<script>(.*?)</script>", html, flags=re.S))
    cdn = "https://cdn.jsdelivr.net"
    return (f"default-src 'self'; script-src 'self' {cdn} {hashes}; "
            f"style-src 'self' {cdn} 'unsafe-inline'; img-src 'self' data: "
            f"https://fastapi.tiangolo.com; connect-src 'self'; object-src 'none'; "
            f"base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


_HEADERS = [(b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer")]


class SecurityHeaders:
    """ASGI middleware: the headers above on every response (a route's own
    ``Content-Security-Policy``, such as ``/docs``'s, is kept).

    Outermost, so that the answers of the API's guard and of the server's error
    handler carry them too; the cost is one list copy per response.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._csp = (b"content-security-policy", CSP.encode())

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                names = {k.lower() for k, _ in headers}
                headers += [h for h in _HEADERS if h[0] not in names]
                if b"content-security-policy" not in names:
                    headers.append(self._csp)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Sessions:
    """The web UI's sign-in sessions, kept in ``store`` (table ``ui_sessions``).

    Lookups are served from memory after the first; the stored last use is written at
    most once a minute per session (the pages poll every second).
    """

    def __init__(self, store: Store, idle: float = IDLE_SECONDS,
                 absolute: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.idle = idle
        # None: as long as a user token signs in (`det master up --token-lifetime`;
        # ABSOLUTE_SECONDS, Determined's 7 days, by default), so a cookie outlives no token
        self.absolute = float(getattr(store, "token_lifetime", ABSOLUTE_SECONDS)
                              if absolute is None else absolute)
        self._clock = clock
        self._lock = threading.Lock()
        # hashed id -> (hashed user token, created, last use, last use stored)
        self._known: dict[str, list[Any]] = {}

    def create(self, user_token: str) -> str:
        """A new session for the holder of ``user_token`` (checked by the caller)."""
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        self.store.prune_ui_sessions(now - self.idle, now - self.absolute)
        self.store.create_ui_session(hash_token(session_id), hash_token(user_token), now)
        return session_id

    def valid(self, session_id: str | None) -> bool:
        """Whether ``session_id`` names a live session; a use keeps it from idling out."""
        if not session_id or not _SESSION_ID.fullmatch(session_id):
            return False
        key = hash_token(session_id)
        with self._lock:  # held throughout: a sign-out in between cannot be undone
            now = self._clock()
            entry = self._known.get(key)
            if entry is None:
                row = self.store.ui_session(key)
                if row is None:
                    return False
                entry = [row["token"], row["created"], row["last_seen"], row["last_seen"]]
            token, created, last_use, stored = entry
            if (now - last_use > self.idle or now - created > self.absolute
                    or not self.store.is_user_token_hash(token)):
                self._revoke(key)
                return False
            entry[2] = now
            if now - stored > _TOUCH_EVERY:
                entry[3] = now
                self.store.touch_ui_session(key, now)
            self._known[key] = entry
            return True

    def user_of(self, session_id: str | None) -> dict[str, Any] | None:
        """The active user of live session ``session_id`` (None: no such session)."""
        if not self.valid(session_id):
            return None
        assert session_id is not None
        with self._lock:
            entry = self._known.get(hash_token(session_id))
        return None if entry is None else self.store.token_user(entry[0])

    def revoke(self, session_id: str | None) -> None:
        """End the session (sign-out): its id works nowhere any more."""
        if session_id:
            with self._lock:
                self._revoke(hash_token(session_id))

    def _revoke(self, key: str) -> None:
        self._known.pop(key, None)
        self.store.delete_ui_session(key)
