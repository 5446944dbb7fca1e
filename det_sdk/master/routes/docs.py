"""The API's own description, ``/openapi.json`` and ``/docs`` (Swagger UI): for the user,
by token or signed in to the web UI; left out of the document itself.

>>> # app.include_router(docs_router(app, master, sessions))
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, Response

from det_sdk.master.core import Master
from det_sdk.master.security import Sessions, docs_csp
from det_sdk.master.ui.web import COOKIE

__all__ = ["docs_router"]


def docs_router(app: FastAPI, master: Master, sessions: Sessions) -> APIRouter:
    """``app``'s OpenAPI document and its Swagger page, behind the user's token or a web
    UI session of ``sessions``."""
    router = APIRouter(include_in_schema=False)

    def reader(request: Request) -> None:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            if master.is_user_token(header[7:].strip()):
                return
        elif sessions.valid(request.cookies.get(COOKIE)):
            return
        raise HTTPException(401, "needs a user token (Authorization: Bearer <token>) or a "
                                 "web UI session")

    @router.get("/openapi.json", include_in_schema=False)
    def openapi_document(request: Request) -> JSONResponse:
        reader(request)
        return JSONResponse(app.openapi())

    @router.get("/docs", include_in_schema=False)
    def docs(request: Request) -> Response:
        reader(request)
        page = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} API")
        csp = docs_csp(page.body.decode())
        return Response(page.body, media_type="text/html",
                        headers={"Content-Security-Policy": csp, "Cache-Control": "no-store"})

    return router
