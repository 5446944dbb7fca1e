"""The master's users (table ``users``) and which user each user token signs in.

User 1 is the first admin: the one `det master up` made before there were users (its
token, in the data directory's ``user.token``, is the ``user_tokens`` row whose
``user_id`` is NULL). Every row stored before users existed (an experiment's owner NULL)
is that user's.

Each request looks up its token: served from memory after the first time (the token's
user id, then the user's row); any change to users or tokens clears what it changes,
so a deactivated user's tokens stop working on the next request.

>>> from det_sdk.master.store import Store
>>> s = Store(":memory:")
>>> s.user(FIRST_ADMIN)["username"], s.user(FIRST_ADMIN)["admin"]
('determined', True)
>>> ann = s.create_user("ann", admin=False, password=None)
>>> s.add_user_token("t0k", user_id=ann)
>>> s.token_user(hash_token("t0k"))["username"]
'ann'
>>> s.update_user(ann, active=False)
>>> s.token_user(hash_token("t0k")) is None
True
"""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound
from det_sdk.master.store.database import Database, hash_token

__all__ = ["FIRST_ADMIN", "FIRST_ADMIN_NAME", "TOKEN_LIFETIME", "UserTables"]

#: the id of the first admin (the user of `det master up`'s token)
FIRST_ADMIN = 1
#: its name: the one det_sdk's single user always answered to
FIRST_ADMIN_NAME = "determined"

#: how long a user token signs in after it was handed out: Determined's user session
#: (``SessionDuration``, 7 days). `det master up --token-lifetime` sets another. The
#: master's own token (`det master up`'s, in the data directory) is no session: it lasts.
TOKEN_LIFETIME = 7 * 24 * 3600.0

_USER_FIELDS = ("username", "admin", "active", "password", "display_name")


def _user(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "admin": bool(row["admin"]), "active": bool(row["active"])}


class UserTables(Database):
    """The ``users`` table and the user behind each user token."""

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self._users_lock = threading.Lock()
        self._users_by_id: dict[int, dict[str, Any]] | None = None
        # hash_token(token) -> (user id, when it was handed out; None: the master's own)
        self._token_uids: dict[str, tuple[int, float | None]] = {}
        self.token_lifetime = TOKEN_LIFETIME  # seconds; the master sets it at start
        # bumped by every change: a read that raced a change does not fill the cache
        # with what it read before (lock order: the database's lock, then this one)
        self._users_gen = self._tokens_gen = 0
        with self.tx() as db:
            db.execute("INSERT OR IGNORE INTO users (id, username, admin, active, created)"
                       " VALUES (?, ?, 1, 1, ?)", (FIRST_ADMIN, FIRST_ADMIN_NAME, time.time()))

    # --- users ------------------------------------------------------------------------

    def _by_id(self) -> dict[int, dict[str, Any]]:
        with self._users_lock:
            cached, gen = self._users_by_id, self._users_gen
        if cached is not None:
            return cached
        loaded = {r["id"]: _user(r) for r in self._all("SELECT * FROM users ORDER BY id")}
        with self._users_lock:
            if gen == self._users_gen:
                self._users_by_id = loaded
        return loaded

    def _users_changed(self) -> None:
        with self._users_lock:
            self._users_by_id = None
            self._users_gen += 1

    def users(self) -> list[dict[str, Any]]:
        """Every user, by id (with the password's hash: callers leave it out)."""
        return list(self._by_id().values())

    def user(self, user_id: int) -> dict[str, Any] | None:
        return self._by_id().get(user_id)

    def user_by_name(self, username: str) -> dict[str, Any] | None:
        return next((u for u in self._by_id().values() if u["username"] == username), None)

    def user_names(self) -> dict[int, str]:
        """Each user's name by id (an owner id shown as its user's current name)."""
        return {i: u["username"] for i, u in self._by_id().items()}

    def create_user(self, username: str, admin: bool, password: str | None) -> int:
        """A new active user (``password``: its hash, or None: none set); its id."""
        with self.tx() as db:
            if db.execute("SELECT 1 FROM users WHERE username = ?", (username,)).fetchone():
                raise Conflict(f"username: a user named {username!r} already exists")
            cur = db.execute("INSERT INTO users (username, admin, active, password, created)"
                             " VALUES (?, ?, 1, ?, ?)",
                             (username, int(admin), password, time.time()))
        self._users_changed()
        assert cur.lastrowid is not None
        return int(cur.lastrowid)

    def update_user(self, user_id: int, **fields: Any) -> None:
        """Set some of ``username``, ``admin``, ``active``, ``password`` (a hash) and
        ``display_name``. Deactivating a user, or setting their password, also ends
        their tokens and UI sessions (as Determined's, the password's sessions: whoever
        knew the old one is out)."""
        unknown = set(fields) - set(_USER_FIELDS)
        if unknown:
            raise InvalidRequest(f"not a user's field: {sorted(unknown)}")
        with self.tx() as db:
            if db.execute("SELECT 1 FROM users WHERE id = ?", (user_id,)).fetchone() is None:
                raise NotFound(f"no user {user_id}")
            name = fields.get("username")
            if name is not None and db.execute(
                    "SELECT 1 FROM users WHERE username = ? AND id != ?",
                    (name, user_id)).fetchone():
                raise Conflict(f"username: a user named {name!r} already exists")
            for key, value in fields.items():
                value = int(value) if key in ("admin", "active") else value
                db.execute(f"UPDATE users SET {key} = ? WHERE id = ?", (value, user_id))
            ends = fields.get("active") is False or fields.get("password") is not None
            if ends:
                self._revoke_user(db, user_id)
        self._users_changed()
        if ends:
            self._tokens_changed(lambda uid: uid == user_id)

    def owner_or_first(self, owner_id: int | None) -> int:
        """An owner column's value as a user id: NULL (made before users) is the first
        admin's."""
        return FIRST_ADMIN if owner_id is None else int(owner_id)

    def owner_of(self, kind: str, ident: str) -> int | bool:
        """The id of the user who owns ``kind`` (experiment, trial, job, model, command,
        checkpoint: its trial's experiment's owner) ``ident``;
        False: there is no such thing (the route answers 404)."""
        sql = {"experiment": "SELECT owner_id FROM experiments WHERE id = ?",
               "trial": "SELECT e.owner_id FROM trials t JOIN experiments e"
                        " ON e.id = t.experiment_id WHERE t.id = ?",
               "job": "SELECT owner_id FROM jobs WHERE id = ?"}.get(kind)
        if kind == "model":
            found = self._model_owner(ident)
        elif kind == "command":
            found = self._command_owner(ident)
        elif kind == "checkpoint":
            found = self._one("SELECT e.owner_id FROM checkpoints c JOIN trials t"
                              " ON t.id = c.trial_id JOIN experiments e"
                              " ON e.id = t.experiment_id WHERE c.uuid = ?", ident)
        elif sql is None:
            raise InvalidRequest(f"no owner lookup for {kind!r}")
        elif not ident.isdigit() or int(ident) >= 2**63:
            return False
        else:
            found = self._one(sql, int(ident))
        return False if found is None else self.owner_or_first(found["owner_id"])

    def _command_owner(self, ident: str) -> dict[str, Any] | None:
        if not ident.isdigit() or int(ident) >= 2**63:
            return None
        try:
            return self._one("SELECT owner_id FROM commands WHERE id = ?", int(ident))
        except sqlite3.OperationalError:  # det_sdk.master.commands' table: made on first use
            return None

    def _model_owner(self, ident: str) -> dict[str, Any] | None:
        try:
            found = self._one("SELECT owner_id FROM models WHERE name = ?", ident)
            if found is None and ident.isdigit() and int(ident) < 2**63:
                found = self._one("SELECT owner_id FROM models WHERE id = ?", int(ident))
        except sqlite3.OperationalError:  # the registry's table is made on first use
            return None
        return found

    # --- tokens -----------------------------------------------------------------------

    def add_user_token(self, token: str, user_id: int | None = None, ui: bool = False) -> None:
        """Record ``token`` (kept hashed) as ``user_id``'s; None: the master's own token
        (`det master up`'s, of the first admin), which sign-out does not end. ``ui``: a
        web UI sign-in's, nobody else holds it: it goes when its last session does."""
        hashed = hash_token(token)
        with self.tx() as db:
            # tokens stored in clear by earlier versions go: the token file re-adds its own
            db.execute("DELETE FROM user_tokens WHERE token NOT LIKE 'sha256:%'")
            db.execute("INSERT OR IGNORE INTO user_tokens (token, created, user_id, ui)"
                       " VALUES (?, ?, ?, ?)", (hashed, time.time(), user_id, int(ui)))
        self._tokens_changed(lambda uid: False, hashed)

    def _tokens_changed(self, gone: Any, hashed: str | None = None) -> None:
        with self._users_lock:
            self._tokens_gen += 1
            self._token_uids = {h: e for h, e in self._token_uids.items()
                                if h != hashed and not gone(e[0])}

    def _token_entry(self, hashed: str) -> tuple[int, float | None] | None:
        """(user id, when handed out; None: the master's own token) of ``hashed``."""
        with self._users_lock:
            entry, gen = self._token_uids.get(hashed), self._tokens_gen
        if entry is None:
            found = self._one("SELECT COALESCE(user_id, ?) AS uid, created,"
                              " user_id IS NULL AS own FROM user_tokens WHERE token = ?",
                              FIRST_ADMIN, hashed)
            if found is None:
                return None
            entry = (int(found["uid"]), None if found["own"] else float(found["created"]))
            with self._users_lock:
                if gen == self._tokens_gen:
                    self._token_uids[hashed] = entry
        return entry

    def _expired(self, entry: tuple[int, float | None]) -> bool:
        return entry[1] is not None and time.time() - entry[1] >= self.token_lifetime

    def token_user(self, hashed: str) -> dict[str, Any] | None:
        """The active user ``hashed`` (``hash_token`` of a token) signs in; None: none
        (unknown, ended, past its lifetime, or its user deactivated)."""
        entry = self._token_entry(hashed)
        if entry is None or self._expired(entry):
            return None
        user = self.user(entry[0])
        return user if user is not None and user["active"] else None

    def expired_token_user(self, hashed: str) -> dict[str, Any] | None:
        """The user whose token ``hashed`` is past its lifetime (None: it is not, or is
        no token): who is told their session expired.

        >>> from det_sdk.master.store import Store
        >>> s = Store(":memory:")
        >>> s.add_user_token("t0k", user_id=s.create_user("ann", admin=False, password=None))
        >>> s.token_lifetime = 0.0  # every sign-in over at once
        >>> s.token_user(hash_token("t0k")), s.expired_token_user(hash_token("t0k"))["username"]
        (None, 'ann')
        """
        entry = self._token_entry(hashed)
        if entry is None or not self._expired(entry):
            return None
        return self.user(entry[0])

    def is_master_token(self, hashed: str) -> bool:
        """Whether ``hashed`` is the master's own token (`det master up`'s)."""
        return self._one("SELECT 1 AS ok FROM user_tokens WHERE token = ? AND user_id IS NULL",
                         hashed) is not None

    def revoke_token(self, hashed: str) -> None:
        """End one token and the UI sessions it opened."""
        with self.tx() as db:
            db.execute("DELETE FROM ui_sessions WHERE token = ?", (hashed,))
            db.execute("DELETE FROM user_tokens WHERE token = ?", (hashed,))
        self._tokens_changed(lambda uid: False, hashed)

    def _revoke_user(self, db: Any, user_id: int) -> None:
        # the master's own token (user_id NULL) is the first admin's: it stays, refused
        # while that user is inactive (token_user checks), so that reactivating works
        db.execute("DELETE FROM ui_sessions WHERE token IN"
                   " (SELECT token FROM user_tokens WHERE user_id = ?)", (user_id,))
        db.execute("DELETE FROM user_tokens WHERE user_id = ?", (user_id,))
