"""HTTP side of the web UI: sign-in, the session cookie, static files, JSON for the pages.

Every ``/ui/api/`` call and the app page need a signed-in user: the session cookie,
or ``Authorization: Bearer <user token>`` (what ``det ui`` and scripts use). The
cookie holds a random session id (``det_sdk.master.security.Sessions``: 12 hours idle,
7 days at most, revoked server-side at sign-out, kept across master restarts), never
the user token; HttpOnly (page scripts never see it), SameSite=Strict, Path=/.
Requests that change state, sign-out included, also need the ``X-Det-UI`` header,
which a page of another origin (another port of 127.0.0.1 is same-site, so its
requests do carry the cookie) cannot send without a CORS preflight this server never
grants.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import secrets
import tarfile
import threading
import time
import urllib.parse
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from det_sdk.api import MAX_PAGE_LIMIT, STAGE_PATTERN
from det_sdk.errors import ArgumentTypeError
from det_sdk.master.security import ABSOLUTE_SECONDS, Sessions
from det_sdk.master.ui.views import (
    CURVE_POINTS,
    CURVE_TRIALS,
    MAX_CURVE_POINTS,
    MAX_CURVE_TRIALS,
    PAGE,
    Views,
    read_log,
)
from det_sdk.storage import pid_alive

__all__ = ["COOKIE", "http_url", "ui_router"]

COOKIE = "det_session"
CODE_TTL = 300.0  # seconds a `det ui` sign-in link stays usable
ACTION_HEADER = "x-det-ui"
MAX_POINTS_DEFAULT = 2000
STATIC = resources.files("det_sdk.master.ui") / "static"
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".md": "text/plain; charset=utf-8",
          ".svg": "image/svg+xml", "": "text/plain; charset=utf-8"}


class _StaticFiles:
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


def _json(request: Request, data: Any) -> Response:
    """JSON, gzipped when large and accepted (a 100k-point series is megabytes)."""
    body = json.dumps(data, separators=(",", ":"), allow_nan=False,
                      default=_non_finite).encode()
    headers = {"Cache-Control": "no-store"}
    if len(body) > 8192 and "gzip" in request.headers.get("accept-encoding", ""):
        body = gzip.compress(body, 5)
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type="application/json", headers=headers)


async def _small_body(request: Request, limit: int = 65536) -> bytes:
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


def _clean(value: Any) -> Any:
    """NaN and infinities (a diverged loss) become null: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


class _SignInCodes:
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


def ui_router(master: Any, sessions: Sessions | None = None) -> APIRouter:
    """The web UI's routes, over ``master`` (a ``det_sdk.master.core.Master``).

    >>> # app.include_router(ui_router(master))
    """
    router = APIRouter(include_in_schema=False)
    sessions = sessions or Sessions(master.store)
    views = Views(master)
    static = _StaticFiles()
    codes = _SignInCodes()
    # `det tensorboard` processes that told the master where they serve, by experiment
    tensorboards: list[dict[str, Any]] = []

    def signed_in(request: Request) -> bool:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return master.store.is_user_token(header[7:].strip())
        return sessions.valid(request.cookies.get(COOKIE))

    def user(request: Request) -> None:
        """Dependency-like check of every data call: a user, by cookie or bearer token."""
        if not signed_in(request):
            raise HTTPException(401, "sign in at /ui/signin (det ui prints a link)")

    def action_header(request: Request) -> None:
        if ACTION_HEADER not in request.headers and "authorization" not in request.headers:
            raise HTTPException(403, f"state-changing calls need the {ACTION_HEADER} header")

    def action(request: Request) -> None:
        user(request)
        action_header(request)

    def with_cookie(response: Response, token: str, request: Request) -> Response:
        """Sign in: a new session (any session the browser had before ends)."""
        sessions.revoke(request.cookies.get(COOKIE))
        response.set_cookie(COOKIE, sessions.create(token), httponly=True,
                            samesite="strict", path="/", max_age=ABSOLUTE_SECONDS,
                            secure=request.url.scheme == "https")
        return response

    # --- pages and sign-in ------------------------------------------------------------------

    @router.get("/")
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    @router.get("/ui")
    def ui_bare() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    @router.get("/ui/")
    def index(request: Request) -> Response:
        if not signed_in(request):
            return RedirectResponse("/ui/signin", status_code=303)
        return static.response(request, "index.html")

    @router.get("/ui/signin")
    def signin_page(request: Request, code: str | None = None) -> Response:
        if code is not None:
            token = codes.redeem(code)
            if token is None or not master.store.is_user_token(token):
                return _signin_html("That sign-in link was used already or has expired: run "
                                    "<code>det ui</code> again, or paste your token.", 401)
            return with_cookie(RedirectResponse("/ui/", status_code=303), token, request)
        return _signin_html(None, 200)

    @router.post("/ui/signin")
    async def signin(request: Request) -> Response:
        form = urllib.parse.parse_qs((await _small_body(request)).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        if master.store.is_user_token(token):
            return with_cookie(RedirectResponse("/ui/", status_code=303), token, request)
        if token and master.store.allocation_by_token(token) is not None:
            return _signin_html("That is a task's token: only a user token signs in.", 403)
        return _signin_html("Unknown token. <code>det ui</code> prints a sign-in link; the "
                            "token is in <code>~/.det/credentials.json</code>.", 401)

    @router.post("/ui/signout")
    def signout(request: Request) -> Response:
        """End the session server-side (its id works nowhere after), then forget it.
        Needs the action header: a plain form of another origin signs nobody out."""
        action_header(request)
        sessions.revoke(request.cookies.get(COOKIE))
        response = Response(status_code=204)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @router.get("/ui/static/{name:path}")
    def static_file(name: str, request: Request) -> Response:
        # The files are the package's own code (the same for every install): public,
        # so the sign-in page can use the style sheet. No data is ever served here.
        return static.response(request, name)

    # --- data for the pages -------------------------------------------------------------------

    @router.post("/ui/api/signin-codes")
    def signin_code(request: Request) -> dict[str, str]:
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if not master.store.is_user_token(token):
            raise HTTPException(401, "needs a user token (Authorization: Bearer <token>)")
        code = codes.issue(token)
        return {"code": code, "path": f"/ui/signin?code={code}"}

    @router.get("/ui/api/experiments")
    def experiments(request: Request, limit: int = Query(PAGE, ge=1, le=MAX_PAGE_LIMIT),
                    cursor: str | None = Query(None, max_length=200)) -> Response:
        """The newest experiments first, ``limit`` at a time (``next_cursor`` continues)."""
        user(request)
        return _json(request, _clean(views.experiments(limit, cursor)))

    @router.get("/ui/api/experiments/{exp_id}")
    def experiment(exp_id: int, request: Request) -> Response:
        user(request)
        info = views.experiment(exp_id)
        info["tensorboards"] = [tb for tb in live_tensorboards() if exp_id in tb["experiments"]]
        return _json(request, _clean(info))

    @router.get("/ui/api/experiments/{exp_id}/curves")
    def curves(exp_id: int, request: Request,
               max_trials: int = Query(CURVE_TRIALS, ge=1, le=MAX_CURVE_TRIALS),
               max_points: int = Query(CURVE_POINTS, ge=0, le=MAX_CURVE_POINTS)) -> Response:
        """The best ``max_trials`` trials' searcher metric, ``max_points`` validations each
        (0: all), and ``total_trials``: a bounded answer however many trials there are."""
        user(request)
        return _json(request, _clean(views.curves(exp_id, max_trials, max_points)))

    @router.post("/ui/api/experiments/{exp_id}/{verb}")
    def experiment_action(exp_id: int, verb: str, request: Request) -> dict[str, str]:
        action(request)
        do = {"pause": master.pause_experiment, "activate": master.activate_experiment,
              "kill": master.kill_experiment}.get(verb)
        if do is None:
            raise HTTPException(404, f"no action {verb!r}: pause, activate or kill")
        do(exp_id)
        return {"state": master.store.experiment(exp_id)["state"]}

    @router.get("/ui/api/trials/{trial_id}")
    def trial(trial_id: int, request: Request) -> Response:
        user(request)
        return _json(request, _clean(views.trial(trial_id)))

    @router.get("/ui/api/trials/{trial_id}/metrics")
    def trial_metrics(trial_id: int, request: Request,
                      max_points: int = Query(MAX_POINTS_DEFAULT, ge=0),
                      group: str | None = None, x_min: float | None = None,
                      x_max: float | None = None,
                      stage: str | None = Query(None, pattern=STAGE_PATTERN)) -> Response:
        """``max_points=0``: the full series; ``x_min``/``x_max`` (batches): a zoomed window;
        ``stage``: that stage's series (none: the default stage's)."""
        user(request)
        x_range = (x_min if x_min is not None else -math.inf,
                   x_max if x_max is not None else math.inf)
        data = views.metrics(trial_id, max_points, group,
                             None if x_min is None and x_max is None else x_range, stage)
        return _json(request, data)

    @router.get("/ui/api/trials/{trial_id}/logs")
    def trial_logs(trial_id: int, request: Request, offset: int = -262144) -> Response:
        user(request)
        master.trial(trial_id)
        return _json(request, read_log(master.logs_path("trials", trial_id), offset))

    @router.get("/ui/api/checkpoints/{uuid}/download")
    def download_checkpoint(uuid: str, request: Request) -> Response:
        user(request)
        path = Path(master.checkpoint_info(uuid)["path"])
        if not path.is_dir():
            raise HTTPException(410, f"checkpoint {uuid} is recorded but its files are gone")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(path, arcname=".")
        return Response(buf.getvalue(), media_type="application/gzip", headers={
            "Content-Disposition": f'attachment; filename="checkpoint-{uuid}.tar.gz"'})

    @router.get("/ui/api/jobs")
    def jobs(request: Request, limit: int = Query(PAGE, ge=1, le=MAX_PAGE_LIMIT),
             cursor: str | None = Query(None, max_length=200)) -> Response:
        user(request)
        return _json(request, views.jobs(limit, cursor))

    @router.get("/ui/api/models")
    def models(request: Request) -> Response:
        user(request)
        return _json(request, views.models())

    @router.get("/ui/api/jobs/{job_id}")
    def job(job_id: int, request: Request) -> Response:
        user(request)
        return _json(request, views.job(job_id))

    @router.get("/ui/api/jobs/{job_id}/logs")
    def job_logs(job_id: int, request: Request, offset: int = -262144) -> Response:
        user(request)
        master.job(job_id)
        return _json(request, read_log(master.logs_path("jobs", job_id), offset))

    # --- TensorBoard (det tensorboard) ------------------------------------------------------

    def live_tensorboards() -> list[dict[str, Any]]:
        # `det tensorboard` runs on the master's machine (the embedded master's CLI
        # shares its files): a dead pid means that TensorBoard is gone.
        tensorboards[:] = [tb for tb in tensorboards if pid_alive(tb["pid"])]
        return list(tensorboards)

    @router.get("/ui/api/tensorboard-dirs")
    def tensorboard_dirs(request: Request, experiment_ids: str = Query(...)) -> Response:
        user(request)
        try:
            ids = [int(x) for x in experiment_ids.split(",") if x.strip()]
        except ValueError:
            raise HTTPException(400, "experiment_ids: comma-separated integers") from None
        return _json(request, views.tensorboard_dirs(ids))

    @router.post("/ui/api/tensorboards", status_code=201)
    async def register_tensorboard(request: Request) -> dict[str, bool]:
        action(request)
        try:
            body = json.loads(await _small_body(request))
            entry = {"url": http_url(body["url"], "url"), "pid": int(body["pid"]),
                     "experiments": [int(e) for e in body.get("experiments", [])]}
        except (KeyError, TypeError, ValueError):
            raise HTTPException(400, "body: {url, pid, experiments}") from None
        tensorboards.append(entry)
        return {"ok": True}

    @router.get("/ui/api/tensorboards")
    def list_tensorboards(request: Request) -> Response:
        user(request)
        return _json(request, live_tensorboards())

    return router


def _signin_html(message: str | None, status: int) -> HTMLResponse:
    note = f'<p class="error" id="signin-error">{message}</p>' if message else ""
    return HTMLResponse(status_code=status, content=f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in · det_sdk</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/ui/static/style.css"></head>
<body class="signin"><main class="card">
<h1>det_sdk</h1>
<p>Run <code>det ui</code> for a link that signs you in, or paste your user token.</p>
{note}
<form method="post" action="/ui/signin">
<label>User token <input type="password" name="token" id="token" autocomplete="off"
 required autofocus></label>
<button type="submit" id="signin">Sign in</button>
</form></main></body></html>""")
