"""Users, as Determined 0.38's routes: ``/api/v1/auth/login`` (no token: a name and a
password), ``/api/v1/auth/logout``, ``/api/v1/me``, ``/api/v1/users`` (list, create),
``/api/v1/users/{user_id}`` (get, patch), ``/api/v1/users/{username}/by-username`` and
``/api/v1/users/{user_id}/password``. Who may call which is det_sdk.master.permissions'
table; the accounts themselves are det_sdk.master.accounts.

>>> # app.include_router(users_router(master, user))
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from det_sdk.master.accounts import TooManyAttempts, user_out
from det_sdk.master.core import Master
from det_sdk.master.routes.common import ERROR, Dependency, Id, Principal

__all__ = ["users_router"]

Username = Annotated[str, Path(min_length=1, max_length=64)]
_LOGIN_DOC: dict[int | str, dict[str, Any]] = {
    429: {**ERROR, "description": "too many failed sign-ins for this user or address; "
                                  "`Retry-After` says when to try again"}}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoginRequest(_Body):
    username: str = Field(max_length=64)
    password: str = Field(max_length=1024)


class NewUser(_Body):
    username: str = Field(max_length=64)
    admin: bool = False
    active: bool = True


class CreateUserRequest(_Body):
    """Determined's ``v1PostUserRequest``: the user, and its password (none: it cannot
    sign in until one is set)."""

    user: NewUser
    password: str | None = Field(None, max_length=1024)


class PatchUserRequest(_Body):
    """What to change of a user (absent: unchanged)."""

    username: str | None = Field(None, max_length=64)
    admin: bool | None = None
    active: bool | None = None
    display_name: str | None = Field(None, max_length=128)
    password: str | None = Field(None, max_length=1024)


class PasswordRequest(_Body):
    password: str = Field(max_length=1024)


def users_router(master: Master, user: Dependency) -> APIRouter:
    """The users' routes over ``master``; ``user``: the dependency admitting a user's
    token (det_sdk.master.routes.common.auth_dependencies)."""
    router = APIRouter()
    accounts = master.accounts

    @router.post("/api/v1/auth/login", responses=_LOGIN_DOC)
    def login(body: LoginRequest, request: Request) -> Any:
        """A new token for the user (no token needed). Wrong passwords are limited per
        user name and per address: past the limit, 429 until the window has passed."""
        address = request.client.host if request.client else "unknown"
        try:
            token, found = accounts.login(body.username, body.password, address)
        except TooManyAttempts as err:
            return JSONResponse(status_code=429, content={"detail": str(err)},
                                headers={"Retry-After": str(int(err.retry_after) + 1)})
        return {"token": token, "user": user_out(found)}

    @router.post("/api/v1/auth/logout")
    def logout(request: Request, p: Principal = Depends(user)) -> dict[str, bool]:
        """End this token (and the web UI sessions it opened); the master's own token
        (`det master up`'s) stays: ``revoked`` false."""
        token = request.headers.get("authorization", "")[7:].strip()
        return {"revoked": accounts.logout(token)}

    @router.get("/api/v1/me")
    def me(p: Principal = Depends(user)) -> dict[str, Any]:
        """Who this token signs in."""
        assert p.user_id is not None  # a user's principal
        return {"user": user_out(accounts.user(p.user_id))}

    @router.get("/api/v1/users")
    def list_users(active: bool | None = None,
                   p: Principal = Depends(user)) -> dict[str, list[dict[str, Any]]]:
        """Every user (``active``: only the active, or only the deactivated, ones)."""
        return {"users": [user_out(u) for u in accounts.users()
                          if active is None or u["active"] == active]}

    @router.post("/api/v1/users", status_code=201)
    def create_user(body: CreateUserRequest, p: Principal = Depends(user)) -> dict[str, Any]:
        made = accounts.create(body.user.username, body.user.admin, body.password)
        if not body.user.active:
            made = accounts.update(made["id"], p.user_id, active=False)
        return {"user": user_out(made)}

    @router.get("/api/v1/users/{user_id}")
    def get_user(user_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        return {"user": user_out(accounts.user(user_id))}

    @router.get("/api/v1/users/{username}/by-username")
    def get_user_by_name(username: Username, p: Principal = Depends(user)) -> dict[str, Any]:
        return {"user": user_out(accounts.by_name(username))}

    @router.patch("/api/v1/users/{user_id}")
    def patch_user(user_id: Id, body: PatchUserRequest,
                   p: Principal = Depends(user)) -> dict[str, Any]:
        """An admin's change: rename, (de)activate (a deactivated user's tokens and web
        UI sessions end at once), make or unmake an admin, set the password."""
        changed = accounts.update(user_id, p.user_id, **body.model_dump())
        return {"user": user_out(changed)}

    @router.post("/api/v1/users/{user_id}/password")
    def set_password(user_id: Id, body: PasswordRequest,
                     p: Principal = Depends(user)) -> dict[str, Any]:
        """A user's own new password (or an admin's for anyone)."""
        return {"user": user_out(accounts.update(user_id, p.user_id,
                                                 password=body.password))}

    return router
