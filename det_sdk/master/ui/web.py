"""HTTP side of the web UI: sign-in, the session cookie, static files, JSON for the pages.

Every ``/ui/api/`` call and the app page need a signed-in user: the session cookie,
or ``Authorization: Bearer <user token>`` (what ``det ui`` and scripts use). The
cookie holds a random session id (``det_sdk.master.security.Sessions``: 12 hours idle,
the token lifetime (7 days) at most, revoked server-side at sign-out, kept across master
restarts), never the user token; HttpOnly (page scripts never see it), SameSite=Strict, Path=/.
Requests that change state, sign-out included, also need the ``X-Det-UI`` header,
which a page of another origin (another port of 127.0.0.1 is same-site, so its
requests do carry the cookie) cannot send without a CORS preflight this server never
grants.

The routes themselves are ``det_sdk.master.routes.ui`` (pages and sign-in) and
``det_sdk.master.routes.ui_data`` (the pages' data); this module is what they share.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import math
import os
import secrets
import threading
import time
import urllib.parse
from importlib import resources
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from det_sdk.errors import ArgumentTypeError
from det_sdk.master.security import Sessions

__all__ = ["ACTION_HEADER", "COOKIE", "SignInCodes", "StaticFiles", "UiAuth", "clean",
           "http_url", "json_response", "signin_html", "small_body"]

COOKIE = "det_session"
CODE_TTL = 300.0  # seconds a `det ui` sign-in link stays usable
ACTION_HEADER = "x-det-ui"
STATIC = resources.files("det_sdk.master.ui") / "static"
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".md": "text/plain; charset=utf-8",
          ".svg": "image/svg+xml", "": "text/plain; charset=utf-8"}


class StaticFiles:
    """The package's static files, read once, each with its gzip form and an ETag.

    Revisits cost a 304 (``Cache-Control: no-cache`` + ETag): after an upgrade the
    browser never runs stale code, and nothing needs versioned file names.
    """

    def __init__(self) -> None:
        self._files: dict[str, tuple[bytes, bytes, str]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> tuple[bytes, bytes, str] | None:
        """The file ``name`` (relative to ``static/``), or None: any name that is not a
        file there (a directory, ``..``, a NUL byte, a name too long for the file
        system) is simply not found. Nothing is logged: anyone may ask."""
        with self._lock:
            if name not in self._files:
                if len(name) > 200 or "\0" in name or "\\" in name:
                    return None
                node = STATIC
                for part in name.split("/"):
                    if part in ("", ".", ".."):
                        return None
                    node = node / part
                try:
                    if not node.is_file():
                        return None
                    data = node.read_bytes()
                except (OSError, ValueError):
                    return None
                etag = '"' + hashlib.sha256(data).hexdigest()[:20] + '"'
                self._files[name] = (data, gzip.compress(data, 9, mtime=0), etag)
            return self._files[name]

    def response(self, request: Request, name: str) -> Response:
        found = self.get(name)
        if found is None:
            raise HTTPException(404, "no such static file")
        data, packed, etag = found
        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        media = _TYPES.get(os.path.splitext(name)[1], "application/octet-stream")
        if "gzip" in request.headers.get("accept-encoding", ""):
            headers["Content-Encoding"] = "gzip"
            headers["Vary"] = "Accept-Encoding"
            return Response(packed, media_type=media, headers=headers)
        return Response(data, media_type=media, headers=headers)


def json_response(request: Request, data: Any) -> Response:
    """JSON, gzipped when large and accepted (a 100k-point series is megabytes)."""
    body = json.dumps(data, separators=(",", ":"), allow_nan=False,
                      default=_non_finite).encode()
    headers = {"Cache-Control": "no-store"}
    if len(body) > 8192 and "gzip" in request.headers.get("accept-encoding", ""):
        body = gzip.compress(body, 5)
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type="application/json", headers=headers)


async def small_body(request: Request, limit: int = 65536) -> bytes:
    """The request's body, refused (413) past ``limit`` bytes before more is read: the
    API's size guard covers ``/api/`` only, and these forms and notes are tiny."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"request body over {limit} bytes")
    return body


def _non_finite(obj: Any) -> Any:
    raise ArgumentTypeError(f"{type(obj).__name__} is not JSON serializable")


def clean(value: Any) -> Any:
    """NaN and infinities (a diverged loss) become null: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


class SignInCodes:
    """One-time codes for ``det ui``'s link: the token itself never goes into a URL."""

    def __init__(self) -> None:
        self._codes: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def issue(self, token: str) -> str:
        code = secrets.token_urlsafe(24)
        with self._lock:
            now = time.time()
            self._codes = {c: v for c, v in self._codes.items() if v[1] > now}
            self._codes[code] = (token, now + CODE_TTL)
        return code

    def redeem(self, code: str) -> str | None:
        with self._lock:
            token, expires = self._codes.pop(code, ("", 0.0))
        return token if expires > time.time() else None


def http_url(value: Any, field: str) -> str:
    """``value`` if it is an absolute http(s) URL (what a link may open), else a 400
    naming ``field``: a ``javascript:`` URL in a link would run in the UI's origin.

    >>> http_url("http://127.0.0.1:6006/", "url")
    'http://127.0.0.1:6006/'
    >>> http_url("javascript:alert(1)", "url")
    Traceback (most recent call last):
    fastapi.exceptions.HTTPException: 400: url: an http:// or https:// URL is expected, \
got 'javascript:alert(1)'
    """
    text = value if isinstance(value, str) else ""
    try:
        parts = urllib.parse.urlsplit(text)
        ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok or len(text) > 2048 or any(c.isspace() or ord(c) < 32 for c in text):
        raise HTTPException(400, f"{field}: an http:// or https:// URL is expected, got "
                                 f"{str(value)[:100]!r}")
    return text


class UiAuth:
    """Who a UI request is: a user, by session cookie or bearer token (``det ui`` and
    scripts); and the action header that state-changing calls need."""

    def __init__(self, master: Any, sessions: Sessions) -> None:
        self.master = master
        self.sessions = sessions

    def signed_in(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return bool(self.master.is_user_token(header[7:].strip()))
        return self.sessions.valid(request.cookies.get(COOKIE))

    def user(self, request: Request) -> None:
        """Dependency-like check of every data call: a user, by cookie or bearer token."""
        if not self.signed_in(request):
            raise HTTPException(401, "sign in at /ui/signin (det ui prints a link)")

    def action_header(self, request: Request) -> None:
        """403 unless the request carries the action header, or is a script's with a
        user's bearer token (no browser sends that by itself); any other
        ``Authorization`` header (Basic, a stray value) is no such proof."""
        if ACTION_HEADER in request.headers:
            return
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer ") and \
                self.master.is_user_token(header[7:].strip()):
            return
        raise HTTPException(403, f"state-changing calls need the {ACTION_HEADER} header")

    def action(self, request: Request) -> None:
        self.user(request)
        self.action_header(request)

    def with_cookie(self, response: Response, token: str, request: Request) -> Response:
        """Sign in: a new session (any session the browser had before ends)."""
        self.sessions.revoke(request.cookies.get(COOKIE))
        response.set_cookie(COOKIE, self.sessions.create(token), httponly=True,
                            samesite="strict", path="/",
                            max_age=int(self.sessions.absolute),
                            secure=request.url.scheme == "https")
        return response


def signin_html(message: str | None, status: int, next_path: str | None = None
                ) -> HTMLResponse:
    note = f'<p class="error" id="signin-error">{message}</p>' if message else ""
    # where the browser goes once signed in (a path of this master: ui.next_path checks it)
    back = (f'<input type="hidden" name="next" value="{html.escape(next_path)}">'
            if next_path else "")
    return HTMLResponse(status_code=status, content=f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in · det_sdk</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/ui/static/style.css"></head>
<body class="signin"><main class="card">
<h1>det_sdk</h1>
<p>Sign in with your user name and password, run <code>det ui</code> for a link that
signs you in, or paste your user token.</p>
{note}
<form method="post" action="/ui/signin">{back}
<label>User name <input type="text" name="username" id="username" autocomplete="username"
 required autofocus></label>
<label>Password <input type="password" name="password" id="password"
 autocomplete="current-password" required></label>
<button type="submit" id="signin-password">Sign in</button>
</form>
<form method="post" action="/ui/signin">{back}
<label>User token <input type="password" name="token" id="token" autocomplete="off"
 required></label>
<button type="submit" id="signin">Sign in</button>
</form></main></body></html>""")
