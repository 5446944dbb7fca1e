"""The master's user accounts: sign-in by name and password (limited,
det_sdk.master.passwords), sign-out, and the admin's changes to users. The routes
(det_sdk.master.routes.users) call these; the rows are det_sdk.master.store.users.

>>> from det_sdk.master.store import Store
>>> accounts = Accounts(Store(":memory:"))
>>> accounts.create("ann", admin=False, password="ann's secret")["username"]
'ann'
>>> token, user = accounts.login("ann", "ann's secret", "127.0.0.1")
>>> user["admin"], accounts.store.token_user(hash_token(token))["username"]
(False, 'ann')
"""

from __future__ import annotations

import re
import secrets
import threading
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound, RequestError
from det_sdk.master.passwords import (
    SignInLimiter,
    hash_password,
    password_problem,
    verify_password,
)
from det_sdk.master.store import Store, hash_token

__all__ = ["USERNAME", "Accounts", "TooManyAttempts", "Unauthenticated", "user_out"]

#: a user's name: what a shell and a URL path take without quoting (matched whole)
USERNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
# verified when the name is unknown, so that an unknown name costs what a wrong password
# does (the answer's time does not tell which names exist)
_DUMMY = hash_password(secrets.token_urlsafe(16))


class Unauthenticated(RequestError):
    """A sign-in with a wrong name or password, or by a deactivated user: 401."""

    default_status = 401


class TooManyAttempts(RequestError):
    """Sign-in attempts over the limit for this user or address: 429."""

    default_status = 429

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def user_out(user: dict[str, Any]) -> dict[str, Any]:
    """A user as the API shows it (never its password's hash).

    >>> user_out({"id": 2, "username": "ann", "admin": 0, "active": 1, "password": "x",
    ...           "display_name": None, "created": 1.0})["admin"]
    False
    """
    return {"id": user["id"], "username": user["username"],
            "display_name": user.get("display_name") or "", "admin": bool(user["admin"]),
            "active": bool(user["active"]), "has_password": bool(user.get("password"))}


def _username(name: object) -> str:
    if not isinstance(name, str) or not USERNAME.fullmatch(name):
        raise InvalidRequest(f"username {name!r}: expected letters, digits, '.', '_', '@' "
                             "or '-' (1-64, starting with a letter or digit)")
    return name


def _new_password(password: object) -> str:
    problem = password_problem(password)
    if problem:
        raise InvalidRequest(problem)
    assert isinstance(password, str)
    return hash_password(password)


class Accounts:
    """Users of the master whose database is ``store``."""

    def __init__(self, store: Store, limiter: SignInLimiter | None = None) -> None:
        self.store = store
        self.limiter = limiter or SignInLimiter()
        # one change at a time: two admins demoting each other at once leave one admin
        self._changing = threading.Lock()

    def users(self) -> list[dict[str, Any]]:
        return self.store.users()

    def owner(self, owner_id: int | None) -> tuple[int, str]:
        """An owner column's value as ``(user id, current name)`` (NULL: the first
        admin's)."""
        uid = self.store.owner_or_first(owner_id)
        return uid, self.store.user_names().get(uid, "")

    def owner_of(self, kind: str, ident: str) -> int | bool:
        """Who owns ``kind`` (experiment, trial, job, model, checkpoint) ``ident``;
        False: no such thing."""
        return self.store.owner_of(kind, ident)

    def user(self, user_id: int) -> dict[str, Any]:
        user = self.store.user(user_id)
        if user is None:
            raise NotFound(f"no user {user_id}")
        return user

    def by_name(self, username: str) -> dict[str, Any]:
        user = self.store.user_by_name(username)
        if user is None:
            raise NotFound(f"no user named {username!r}")
        return user

    def login(self, username: str, password: str, address: str,
              ui: bool = False) -> tuple[str, dict[str, Any]]:
        """A new token for ``username`` if ``password`` is its password; the user.
        ``ui``: for a web UI session (the token ends with its last session)."""
        wait = self.limiter.locked(username, address)
        if wait > 0:
            raise TooManyAttempts(f"too many failed sign-ins for {username!r} or from "
                                  f"{address}: try again in {wait:.0f} s", wait)
        user = self.store.user_by_name(username)
        stored = user.get("password") if user is not None else _DUMMY
        ok = verify_password(password, stored)
        if user is None or not ok or not user["active"]:
            self.limiter.failed(username, address)
            raise Unauthenticated("invalid username or password (or the user is deactivated)")
        self.limiter.succeeded(username)
        self.store.prune_expired_tokens()  # each sign-in sweeps the long-expired ones
        token = secrets.token_urlsafe(32)
        self.store.add_user_token(token, user["id"], ui=ui)
        return token, user

    def expired(self, token: str) -> tuple[dict[str, Any], float] | None:
        """``(its user, the lifetime)`` when ``token`` is a user token past its lifetime
        (``det master up --token-lifetime``); None otherwise.

        >>> Accounts(Store(":memory:")).expired("no such token") is None
        True
        """
        user = self.store.expired_token_user(hash_token(token))
        return None if user is None else (user, self.store.token_lifetime)

    def logout(self, token: str) -> bool:
        """End ``token`` (and the UI sessions it opened); False for the master's own token
        (`det master up`'s, kept in the data directory), which stays."""
        hashed = hash_token(token)
        if self.store.is_master_token(hashed):
            return False
        self.store.revoke_token(hashed)
        return True

    def create(self, username: str, admin: bool, password: str | None) -> dict[str, Any]:
        """A new active user; with no password it cannot sign in until one is set."""
        name = _username(username)
        stored = _new_password(password) if password is not None else None
        return self.user(self.store.create_user(name, admin=admin, password=stored))

    def update(self, user_id: int, actor_id: int | None, **fields: Any) -> dict[str, Any]:
        """Change some of ``username``, ``admin``, ``active``, ``display_name`` and
        ``password`` of user ``user_id`` (an admin's call; ``actor_id``: who asks). Refused:
        deactivating oneself, or leaving no active admin."""
        with self._changing:
            return self._update(user_id, actor_id, fields)

    def _update(self, user_id: int, actor_id: int | None,
                fields: dict[str, Any]) -> dict[str, Any]:
        user = self.user(user_id)
        changes = {k: v for k, v in fields.items() if v is not None}
        if "username" in changes:
            _username(changes["username"])
        if "password" in changes:
            changes["password"] = _new_password(changes["password"])
        if changes.get("display_name") is not None and len(changes["display_name"]) > 128:
            raise InvalidRequest("display_name: expected at most 128 characters")
        if changes.get("active") is False and user_id == actor_id:
            raise Conflict("active: you cannot deactivate yourself (another admin can)")
        losing_admin = user["admin"] and user["active"] and (
            changes.get("active") is False or changes.get("admin") is False)
        if losing_admin and not any(u["admin"] and u["active"] and u["id"] != user_id
                                    for u in self.store.users()):
            raise Conflict(f"user {user['username']!r} is the last active admin: make "
                           "another user an admin first")
        if changes:
            self.store.update_user(user_id, **changes)
        return self.user(user_id)
