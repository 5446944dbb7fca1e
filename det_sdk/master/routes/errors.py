"""Errors to HTTP answers, in one place: the master's domain errors
(``det_sdk.master.errors``) to their statuses, invalid input to 400 naming the field, a
full disk to 507, and 405 with every method the path allows.

>>> from fastapi import FastAPI
>>> app = FastAPI()
>>> add_error_handlers(app)
>>> RequestError in app.exception_handlers
True
"""

from __future__ import annotations

import errno
import sqlite3

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from det_sdk.master.errors import STATUS, RequestError
from det_sdk.master.pages import InvalidCursor

__all__ = ["add_error_handlers", "allowed_methods"]

_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE")


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods some route of ``app`` answers at ``path``, sorted: asked of the routes
    themselves (``matches``), so routes of included routers count as well."""
    allowed = []
    for method in _METHODS:
        scope = {"type": "http", "method": method, "path": path, "root_path": "",
                 "path_params": {}, "headers": []}
        if any(r.matches(dict(scope))[0] == Match.FULL for r in app.router.routes):
            allowed.append(method)
    return allowed


def add_error_handlers(app: FastAPI) -> None:
    """Register the master's exception handlers on ``app``."""

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        status = STATUS.get(type(exc), exc.status)
        return JSONResponse(status_code=status, content={"detail": str(exc)})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code != 405:
            return await http_exception_handler(request, exc)
        # Starlette's 405 names the methods of one route only; a path with GET and POST
        # routes must answer `Allow: GET, POST`
        allowed = allowed_methods(app, request.url.path)
        return JSONResponse(status_code=405, content={"detail": exc.detail},
                            headers={"Allow": ", ".join(allowed)})

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # 400 with each field's path and message; the offending input is left out (it may
        # be huge, or a NaN that JSON cannot carry)
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""),
                   "type": e.get("type", "")} for e in exc.errors()]
        return JSONResponse(status_code=400, content={"detail": detail})

    @app.exception_handler(InvalidCursor)
    async def _bad_cursor(request: Request, exc: InvalidCursor) -> JSONResponse:
        # the shape of every other invalid field: the parameter's place and what is wrong
        return JSONResponse(status_code=400, content={"detail": [
            {"loc": ["query", "cursor"], "msg": str(exc), "type": "value_error"}]})

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, exc: RecursionError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": "request nested too deeply"})

    @app.exception_handler(OverflowError)
    async def _overflow(request: Request, exc: OverflowError) -> JSONResponse:
        return JSONResponse(status_code=400,
                            content={"detail": f"a number is out of range: {exc}"})

    @app.exception_handler(sqlite3.OperationalError)
    async def _database(request: Request, exc: sqlite3.OperationalError) -> JSONResponse:
        if "full" in str(exc):
            return JSONResponse(status_code=507, content={
                "detail": f"the master's disk is full ({exc}); free space and retry"})
        raise exc

    @app.exception_handler(OSError)
    async def _os_error(request: Request, exc: OSError) -> JSONResponse:
        if exc.errno == errno.ENOSPC:
            return JSONResponse(status_code=507, content={
                "detail": f"the master's disk is full: {exc}"})
        raise exc
