"""The web UI's pages and sign-in (``/``, ``/ui/``, ``/ui/signin``, ``/ui/signout``,
``/ui/static/``, ``/ui/api/signin-codes``); the pages' data is
``det_sdk.master.routes.ui_data``. What both share (the session cookie, static files,
JSON answers) is ``det_sdk.master.ui.web``; the rules are in ``det_sdk.master.ui``.

>>> # app.include_router(ui_router(master, sessions))
"""

from __future__ import annotations

import html
import urllib.parse

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from det_sdk.master.accounts import TooManyAttempts, Unauthenticated
from det_sdk.master.core import Master
from det_sdk.master.security import Sessions
from det_sdk.master.ui.next_path import BadNext, safe_next
from det_sdk.master.ui.web import (
    COOKIE,
    SignInCodes,
    StaticFiles,
    UiAuth,
    signin_html,
    small_body,
)

__all__ = ["ui_router"]


def ui_router(master: Master, sessions: Sessions) -> APIRouter:
    """The web UI's pages and sign-in over ``master``, its sessions in ``sessions``.

    >>> # app.include_router(ui_router(master, sessions))
    """
    router = APIRouter(include_in_schema=False)
    auth = UiAuth(master, sessions)
    static = StaticFiles()
    codes = SignInCodes()

    @router.get("/")
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    @router.get("/ui")
    def ui_bare() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    @router.get("/ui/")
    def index(request: Request) -> Response:
        if not auth.signed_in(request):
            return RedirectResponse("/ui/signin", status_code=303)
        return static.response(request, "index.html")

    @router.get("/ui/signin")
    def signin_page(request: Request, code: str | None = None,
                    next_path: str | None = Query(None, alias="next")) -> Response:
        # next: where a browser sent here by a notebook's link goes back (issue 58)
        try:
            back = None if next_path is None else safe_next(next_path)
        except BadNext as err:
            return signin_html(html.escape(str(err)), 400)
        if code is not None:
            token = codes.redeem(code)
            if token is None or not master.is_user_token(token):
                return signin_html("That sign-in link was used already or has expired: run "
                                   "<code>det ui</code> again, or paste your token.", 401,
                                   back)
            return auth.with_cookie(RedirectResponse(back or "/ui/", status_code=303), token,
                                    request)
        return signin_html(None, 200, back)

    @router.post("/ui/signin")
    async def signin(request: Request) -> Response:
        form = urllib.parse.parse_qs((await small_body(request)).decode("utf-8", "replace"))
        try:  # checked first: a refused next signs nobody in (no session half-made)
            back = None if "next" not in form else safe_next(form["next"][0])
        except BadNext as err:
            return signin_html(html.escape(str(err)), 400)
        if "username" in form:  # by name and password (issue 59), limited as the API's
            return await run_in_threadpool(_password_signin, request, form, back)
        token = (form.get("token") or [""])[0].strip()
        if master.is_user_token(token):
            return auth.with_cookie(RedirectResponse(back or "/ui/", status_code=303), token,
                                    request)
        if token and master.allocation_by_token(token) is not None:
            return signin_html("That is a task's token: only a user token signs in.", 403,
                               back)
        return signin_html("Unknown token. <code>det ui</code> prints a sign-in link; the "
                           "token is in <code>~/.det/credentials.json</code>.", 401, back)

    def _password_signin(request: Request, form: dict[str, list[str]],
                         back: str | None = None) -> Response:
        username = (form.get("username") or [""])[0].strip()
        password = (form.get("password") or [""])[0]
        address = request.client.host if request.client else "unknown"
        try:
            token, _ = master.accounts.login(username, password, address, ui=True)
        except TooManyAttempts as err:
            return signin_html(html.escape(str(err)), 429, back)
        except Unauthenticated:
            return signin_html("Wrong user name or password (or the user is "
                               "deactivated).", 401, back)
        return auth.with_cookie(RedirectResponse(back or "/ui/", status_code=303), token,
                                request)

    @router.post("/ui/signout")
    def signout(request: Request) -> Response:
        """End the session server-side (its id works nowhere after), then forget it.
        Needs the action header: a plain form of another origin signs nobody out."""
        auth.action_header(request)
        auth.sessions.revoke(request.cookies.get(COOKIE))
        response = Response(status_code=204)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @router.get("/ui/static/{name:path}")
    def static_file(name: str, request: Request) -> Response:
        # The files are the package's own code (the same for every install): public,
        # so the sign-in page can use the style sheet. No data is ever served here.
        return static.response(request, name)

    @router.post("/ui/api/signin-codes")
    def signin_code(request: Request) -> dict[str, str]:
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if not master.is_user_token(token):
            raise HTTPException(401, "needs a user token (Authorization: Bearer <token>)")
        code = codes.issue(token)
        return {"code": code, "path": f"/ui/signin?code={code}"}

    return router
