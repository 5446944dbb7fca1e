"""The master's user tokens (kept hashed) and the web UI's sessions."""

from __future__ import annotations

import time
from typing import Any

from det_sdk.master.store.database import hash_token
from det_sdk.master.store.users import UserTables

__all__ = ["TokenTables"]

_KEPT_EXPIRED = 30 * 86400.0  # how long an expired token is still recognized as one


class TokenTables(UserTables):
    """The ``user_tokens`` and ``ui_sessions`` tables (each token a user's:
    det_sdk.master.store.users, which adds them)."""

    # --- tokens -----------------------------------------------------------------------

    def is_user_token(self, token: str) -> bool:
        return self.is_user_token_hash(hash_token(token))

    def is_user_token_hash(self, hashed: str) -> bool:
        """Whether ``hashed`` (``hash_token`` of a token) is an active user's token."""
        return self.token_user(hashed) is not None

    def prune_expired_tokens(self, now: float | None = None) -> int:
        """Forget user tokens over a month past their lifetime; how many. Until then an
        expired token is still known, so that its holder is told it expired (and by
        whom to sign in again) rather than that it is unknown.

        >>> from det_sdk.master.store import Store
        >>> s = Store(":memory:")
        >>> s.add_user_token("t0k", user_id=s.create_user("ann", admin=False, password=None))
        >>> s.prune_expired_tokens(), s.prune_expired_tokens(time.time() + 40 * 86400)
        (0, 1)
        """
        cutoff = (time.time() if now is None else now) - self.token_lifetime - _KEPT_EXPIRED
        with self.tx() as db:
            gone = [r[0] for r in db.execute(
                "SELECT token FROM user_tokens WHERE user_id IS NOT NULL AND created < ?",
                (cutoff,))]
            db.execute("DELETE FROM ui_sessions WHERE token IN (SELECT token FROM user_tokens"
                       " WHERE user_id IS NOT NULL AND created < ?)", (cutoff,))
            db.execute("DELETE FROM user_tokens WHERE user_id IS NOT NULL AND created < ?",
                       (cutoff,))
        self._forget(gone)
        return len(gone)

    def end_master_tokens(self) -> int:
        """End the master's own tokens (`det master up`'s, ``user_id`` NULL) and the UI
        sessions they opened; how many. The master calls it before it makes a new one,
        when the data directory's ``user.token`` is gone: deleting that file and
        restarting is how the token is replaced.

        >>> from det_sdk.master.store import Store
        >>> s = Store(":memory:")
        >>> s.add_user_token("own")
        >>> s.end_master_tokens(), s.is_user_token("own")
        (1, False)
        """
        with self.tx() as db:
            gone = [r[0] for r in db.execute(
                "SELECT token FROM user_tokens WHERE user_id IS NULL")]
            db.execute("DELETE FROM ui_sessions WHERE token IN (SELECT token FROM user_tokens"
                       " WHERE user_id IS NULL)")
            db.execute("DELETE FROM user_tokens WHERE user_id IS NULL")
        self._forget(gone)
        return len(gone)

    # --- web UI sessions (det_sdk.master.security.Sessions): ids and tokens hashed ------

    def create_ui_session(self, key: str, token_hash: str, now: float) -> None:
        self._exec("INSERT INTO ui_sessions VALUES (?, ?, ?, ?)", key, token_hash, now, now)

    def ui_session(self, key: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM ui_sessions WHERE id = ?", key)

    def touch_ui_session(self, key: str, now: float) -> None:
        self._exec("UPDATE ui_sessions SET last_seen = ? WHERE id = ?", now, key)

    def delete_ui_session(self, key: str) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM ui_sessions WHERE id = ?", (key,))
            gone = self._orphan_ui_tokens(db)
        self._forget(gone)

    def prune_ui_sessions(self, idle_before: float, created_before: float) -> None:
        """Forget sessions unused since ``idle_before`` or opened before ``created_before``
        (and the tokens of web UI sign-ins that no session uses any more)."""
        with self.tx() as db:
            db.execute("DELETE FROM ui_sessions WHERE last_seen < ? OR created < ?",
                       (idle_before, created_before))
            gone = self._orphan_ui_tokens(db)
        self._forget(gone)

    def _forget(self, hashes: list[str]) -> None:
        """Ended tokens leave the cache of who each token signs in."""
        gone = set(hashes)
        if gone:
            self._tokens_changed(lambda uid: False)
            with self._users_lock:
                self._token_uids = {h: u for h, u in self._token_uids.items()
                                    if h not in gone}

    @staticmethod
    def _orphan_ui_tokens(db: Any) -> list[str]:
        """Delete the web UI sign-ins' tokens that no session uses; their hashes. A token
        younger than a minute stays: its session is being opened (nobody but the
        master ever held it, so one left over a little longer hands out nothing)."""
        where = ("ui = 1 AND created < ? AND token NOT IN (SELECT token FROM ui_sessions)",
                 (time.time() - 60,))
        gone = [r[0] for r in db.execute(f"SELECT token FROM user_tokens WHERE {where[0]}",
                                         where[1])]
        db.execute(f"DELETE FROM user_tokens WHERE {where[0]}", where[1])
        return gone
