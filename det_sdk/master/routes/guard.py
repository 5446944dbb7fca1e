"""The guard in front of ``/api/``: the token, then the body's size, both checked before
any byte of the body is read (an anonymous or oversized upload costs the master nothing).

>>> UPLOAD_BODY_BYTES > SMALL_BODY_BYTES
True
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import HTTPException

from det_sdk.master.archive import MAX_ARCHIVE_BYTES
from det_sdk.master.core import Master
from det_sdk.master.routes.common import authenticate

__all__ = ["SMALL_BODY_BYTES", "UPLOAD_BODY_BYTES", "Guard"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]

# Bodies: a create request carries the model directory (base64) and its config; any
# other request is small. Checked from Content-Length before the body is read, and
# counted as it arrives when there is none (chunked).
SMALL_BODY_BYTES = 1 << 20
UPLOAD_BODY_BYTES = 4 * (MAX_ARCHIVE_BYTES // 3 + 1) + SMALL_BODY_BYTES
_UPLOAD_ROUTES = {("POST", "/api/v1/experiments"), ("POST", "/api/v1/jobs")}
_UPLOAD_ROUTES |= {("POST", "/api/v1/commands")}  # its context directory (issue 58)
_UPLOAD_ROUTES |= {("POST", "/api/v1/notebooks")}  # a notebook's context directory too
# the one route a caller without a token may call: sign-in by name and password
_NO_TOKEN_ROUTES = {("POST", "/api/v1/auth/login")}


async def _send_error(send: Callable[[Message], Awaitable[None]], status: int,
                      detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware in front of ``/api/``: authentication first, then the body's size.

    Pure ASGI (not Starlette's BaseHTTPMiddleware) so that the metric-report hot path
    pays for two header lookups, not for a task per request.
    """

    def __init__(self, app: Any, master: Master) -> None:
        self.app = app
        self.master = master

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)
            return
        auth, length = "", None
        for key, value in scope["headers"]:
            if key == b"authorization":
                auth = value.decode("latin-1")
            elif key == b"content-length":
                length = value
        if (scope["method"], scope["path"].rstrip("/")) not in _NO_TOKEN_ROUTES:
            try:
                principal = authenticate(self.master, auth)
            except HTTPException as err:
                await _send_error(send, err.status_code, err.detail)
                return
            scope.setdefault("state", {})["det_principal"] = principal
        limit = (UPLOAD_BODY_BYTES if (scope["method"], scope["path"].rstrip("/"))
                 in _UPLOAD_ROUTES else SMALL_BODY_BYTES)
        if length is not None:
            if not length.isdigit():
                await _send_error(send, 400, "Content-Length is not a number")
                return
            if int(length) > limit:
                await _send_error(send, 413, f"request body of {int(length)} bytes is over "
                                             f"the limit of {limit} for this route")
                return
            await self.app(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                # FastAPI passes an HTTPException raised while reading the body through
                raise HTTPException(413, f"request body over the limit of {limit} bytes for "
                                         f"this route")
            return message

        await self.app(scope, counted, send)
