"""The notebooks' proxy: ``/proxy/notebooks/{id}/...`` forwards HTTP and websockets
(kernels, terminals) to that notebook's JupyterLab on 127.0.0.1, and nothing else does.

Who may pass: the notebook's owner or an admin, signed in to the web UI (its session
cookie) or holding a user token (``Authorization: Bearer``); anyone else gets the
master's 401 or 403 and no byte of JupyterLab. The HTTP route's rule is in
``det_sdk.master.permissions`` (checked before the route runs, as every route's); the
websocket route is Starlette's (FastAPI's dependencies do not run for it) and applies
the same rule itself before it accepts.

What is forwarded: the request's method, path under the notebook's prefix (never
another's: a ``.`` or ``..`` segment is refused), query and body, streamed both ways
(no whole body is held); its headers without the caller's credentials (the master's
cookie and token stay here) and with the notebook's own JupyterLab token, which only
the master knows. A browser's cross-site request (an ``Origin`` that is not the
master's) is refused here, and the origin is not forwarded (JupyterLab would compare it
with its own 127.0.0.1 address). A notebook that is not running answers 409; its
websockets are closed within :data:`WATCH_SECONDS` of its end.

>>> forwarded_path("/proxy/notebooks/3/api/kernels", 3)
'api/kernels'
>>> forwarded_path("/proxy/notebooks/3/a/%2E%2E/x", 3)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
fastapi.exceptions.HTTPException: 400: path: a '.' or '..' segment ...
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import unquote, urlsplit

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from det_sdk.master.core import Master
from det_sdk.master.errors import RequestError
from det_sdk.master.notebooks import proxy_prefix
from det_sdk.master.routes.common import Principal, authenticate
from det_sdk.master.security import Sessions
from det_sdk.master.ui.web import COOKIE

__all__ = ["PROXY_PATH", "forwarded_path", "notebook_proxy_router", "notebook_ws_route"]

log = logging.getLogger("det_sdk.master.routes.notebook_proxy")

PROXY_PATH = "/proxy/notebooks/{nb_id}/{path:path}"
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
#: seconds between two looks at a proxied websocket's notebook (closed once it ended)
WATCH_SECONDS = 1.0
#: the largest websocket message forwarded (a kernel's output with images, bounded)
MAX_WS_MESSAGE = 64 << 20
# hop-by-hop headers, and what the master keeps for itself
_DROP_REQUEST = {"host", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                 "proxy-authorization", "proxy-connection", "authorization", "cookie",
                 "origin", "referer", "content-length"}
_DROP_RESPONSE = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                  "proxy-authenticate", "trailer"}


def forwarded_path(raw_path: str, nb_id: int) -> str:
    """The path under notebook ``nb_id``'s prefix, as the caller encoded it; 400 for one
    with a ``.`` or ``..`` segment (encoded or not) or outside the prefix."""
    prefix = proxy_prefix(nb_id)
    if not raw_path.startswith(prefix):
        raise HTTPException(400, f"path: expected one under {prefix}")
    rest = raw_path[len(prefix):]
    for segment in rest.split("/"):
        plain = unquote(unquote(segment))
        if plain in (".", "..") or "/" in plain or "\\" in plain:
            raise HTTPException(400, "path: a '.' or '..' segment (or an encoded '/') "
                                     "would leave the notebook's prefix")
    return rest


def _same_origin(origin: str | None, host: str | None) -> bool:
    """A browser's ``Origin`` names the master (its Host), or there is none (a script).

    >>> _same_origin("http://127.0.0.1:8080", "127.0.0.1:8080"), _same_origin(None, "h")
    (True, True)
    >>> _same_origin("https://evil.example", "127.0.0.1:8080")
    False
    """
    if origin is None:
        return True
    return bool(host) and urlsplit(origin).netloc == host


def _request_headers(headers: Any, token: str) -> list[tuple[str, str]]:
    """The caller's headers without hop-by-hop ones and without its credentials (the
    master's cookie dropped from ``Cookie``; JupyterLab's own cookies kept), and with the
    notebook's JupyterLab token."""
    out = [(k, v) for k, v in headers.items() if k.lower() not in _DROP_REQUEST]
    cookies = [c for c in headers.get("cookie", "").split(";")
               if c.strip() and c.strip().split("=", 1)[0] != COOKIE]
    if cookies:
        out.append(("cookie", ";".join(cookies).strip()))
    out.append(("authorization", f"token {token}"))
    return out


def _principal(master: Master, sessions: Sessions, conn: Any) -> Principal | None:
    """Who a websocket's handshake is: a user by token or UI session; None otherwise."""
    header = conn.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        try:
            p = authenticate(master, header)
        except HTTPException:
            return None
        return p if p.kind == "user" else None
    user = sessions.user_of(conn.cookies.get(COOKIE))
    if user is None:
        return None
    return Principal("user", user_id=user["id"], username=user["username"],
                     admin=user["admin"])


def notebook_proxy_router(master: Master) -> APIRouter:
    """The HTTP side of the proxy (its permission rule checked before it runs)."""
    import httpx

    router = APIRouter(include_in_schema=False)
    client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None), trust_env=False,
                               limits=httpx.Limits(max_connections=200))

    @router.api_route(PROXY_PATH, methods=METHODS)
    async def proxy_http(nb_id: int, path: str, request: Request) -> Response:
        """Forward the request to the notebook's JupyterLab; stream its answer back."""
        rest = forwarded_path(request.scope.get("raw_path", b"").decode("latin-1")
                              or request.url.path, nb_id)
        if not _same_origin(request.headers.get("origin"), request.headers.get("host")):
            raise HTTPException(403, "a cross-site request: the notebook answers its own "
                                     "master's pages only")
        port, token = await run_in_threadpool(master.notebooks.upstream, nb_id)
        url = f"http://127.0.0.1:{port}{proxy_prefix(nb_id)}{rest}"
        if request.url.query:
            url += f"?{request.url.query}"
        body = request.stream() if request.method in ("POST", "PUT", "PATCH") else None
        upstream = client.build_request(request.method, url,
                                        headers=_request_headers(request.headers, token),
                                        content=body)
        try:
            resp = await client.send(upstream, stream=True)
        except httpx.HTTPError as err:
            raise HTTPException(502, f"notebook {nb_id}'s JupyterLab did not answer: "
                                     f"{type(err).__name__}") from None
        headers = [(k, v) for k, v in resp.headers.multi_items()
                   if k.lower() not in _DROP_RESPONSE]
        response = StreamingResponse(resp.aiter_raw(), status_code=resp.status_code,
                                     background=BackgroundTask(resp.aclose))
        response.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                for k, v in headers]
        return response

    return router


def notebook_ws_route(master: Master, sessions: Sessions) -> WebSocketRoute:
    """The websocket side of the proxy: the same rule as the HTTP side's (owner or
    admin), applied before the handshake is accepted."""
    from det_sdk.master.permissions import check, rule_for

    async def proxy_ws(ws: WebSocket) -> None:
        try:
            nb_id = int(ws.path_params["nb_id"])
            rest = forwarded_path(ws.scope.get("raw_path", b"").decode("latin-1")
                                  or ws.url.path, nb_id)
            p = _principal(master, sessions, ws)
            if p is None:
                raise HTTPException(401, "sign in (a user token or the web UI's session)")
            await run_in_threadpool(check, master, p, rule_for("GET", PROXY_PATH),
                                    {"nb_id": nb_id}, PROXY_PATH)
            if not _same_origin(ws.headers.get("origin"), ws.headers.get("host")):
                raise HTTPException(403, "a cross-site websocket")
            port, token = await run_in_threadpool(master.notebooks.upstream, nb_id)
        except (HTTPException, RequestError, ValueError) as err:
            log.info("notebook proxy: websocket refused: %s", err)
            await ws.close(code=1008)  # before accept: the handshake's 403
            return
        await _pump(master, ws, nb_id, port, token, rest)

    return WebSocketRoute(PROXY_PATH, proxy_ws)


async def _pump(master: Master, ws: WebSocket, nb_id: int, port: int, token: str,
                rest: str) -> None:
    """Messages both ways until either side closes or the notebook ends."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException

    url = f"ws://127.0.0.1:{port}{proxy_prefix(nb_id)}{rest}"
    if ws.url.query:
        url += f"?{ws.url.query}"
    protocols = list(ws.scope.get("subprotocols") or [])
    try:
        upstream = await connect(url, additional_headers={"Authorization": f"token {token}"},
                                 subprotocols=protocols or None,
                                 max_size=MAX_WS_MESSAGE, proxy=None, open_timeout=30)
    except (OSError, WebSocketException, asyncio.TimeoutError) as err:
        log.info("notebook %s: its JupyterLab refused a websocket: %s", nb_id, err)
        await ws.close(code=1011)
        return
    async with upstream:
        await ws.accept(subprotocol=upstream.subprotocol)

        async def down() -> None:  # JupyterLab -> browser
            async for msg in upstream:
                if isinstance(msg, bytes):
                    await ws.send_bytes(msg)
                else:
                    await ws.send_text(msg)

        async def up() -> None:  # browser -> JupyterLab
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                data = msg.get("bytes")
                await upstream.send(data if data is not None else msg.get("text") or "")

        async def watch() -> None:  # the notebook ended: its websockets go too
            while True:
                await asyncio.sleep(WATCH_SECONDS)
                try:
                    await run_in_threadpool(master.notebooks.upstream, nb_id)
                except RequestError:
                    return

        tasks = [asyncio.ensure_future(t()) for t in (down, up, watch)]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, WebSocketException,
                                         WebSocketDisconnect, RuntimeError, OSError):
                    await t
            with contextlib.suppress(RuntimeError, OSError):
                await ws.close()
