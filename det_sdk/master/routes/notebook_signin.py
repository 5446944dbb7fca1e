"""A browser that opens a notebook without being signed in is sent to the web UI's
sign-in page, which sends it back to the notebook once it is signed in.

The notebooks' proxy (``det_sdk.master.routes.notebook_proxy``) answers 401 JSON to a
request without a user token or the UI's session: right for the API's clients and for
JupyterLab's own calls, but a person who follows a notebook's link in a fresh browser
would see a line of JSON. So a browser's page load there (a ``GET`` or ``HEAD`` that
accepts ``text/html``, with no ``Authorization`` header and no live session cookie) is
answered ``303`` to ``/ui/signin?next=<the path asked for>``; everything else goes on to
the proxy and its 401/403 as before. The sign-in page only follows a ``next`` that is a
path of this master (``det_sdk.master.ui.next_path``).

>>> wants_page({"method": "GET", "path": "/proxy/notebooks/3/lab",
...             "headers": [(b"accept", b"text/html,*/*")]})
True
>>> wants_page({"method": "GET", "path": "/proxy/notebooks/3/api/kernels",
...             "headers": [(b"accept", b"application/json")]})
False
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import cookie_parser

from det_sdk.master.security import Sessions
from det_sdk.master.ui.next_path import BadNext, signin_location
from det_sdk.master.ui.web import COOKIE

__all__ = ["PREFIX", "NotebookSignIn", "wants_page"]

log = logging.getLogger("det_sdk.master.routes.notebook_signin")

PREFIX = "/proxy/notebooks/"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def wants_page(scope: Scope) -> bool:
    """Whether ``scope`` is a browser's page load of a notebook with no token: a ``GET``
    or ``HEAD`` under :data:`PREFIX` that accepts HTML and carries no ``Authorization``
    (a script with a token, or none, keeps its JSON answer)."""
    return (scope.get("method") in ("GET", "HEAD") and str(scope.get("path", ""))
            .startswith(PREFIX) and _header(scope, b"authorization") is None
            and "text/html" in (_header(scope, b"accept") or ""))


class NotebookSignIn:
    """ASGI middleware: :func:`wants_page` without a live UI session is redirected to the
    sign-in page, with the path it asked for as ``next``.

    >>> # app.add_middleware(NotebookSignIn, sessions=sessions)
    """

    def __init__(self, app: Any, sessions: Sessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http" or not wants_page(scope):
            await self.app(scope, receive, send)
            return
        session = cookie_parser(_header(scope, b"cookie") or "").get(COOKIE)
        live: bool = False
        if session:  # a SQLite read at most: off the event loop
            live = await run_in_threadpool(self.sessions.valid, session)
        if live:
            await self.app(scope, receive, send)  # signed in: the proxy's own rule
            return
        raw = bytes(scope.get("raw_path") or scope["path"].encode("latin-1"))
        path = raw.decode("latin-1")
        query = bytes(scope.get("query_string") or b"").decode("latin-1")
        try:
            location = signin_location(f"{path}?{query}" if query else path)
        except BadNext:  # no path of a page (a backslash...): the proxy's 400/401
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location.encode("latin-1")),
                                (b"content-length", b"0"),
                                (b"cache-control", b"no-store")]})
        await send({"type": "http.response.body", "body": b""})
