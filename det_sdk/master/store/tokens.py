"""The master's user tokens (kept hashed) and the web UI's sessions."""

from __future__ import annotations

from typing import Any

from det_sdk.master.store.database import hash_token
from det_sdk.master.store.users import UserTables

__all__ = ["TokenTables"]


class TokenTables(UserTables):
    """The ``user_tokens`` and ``ui_sessions`` tables (each token a user's:
    det_sdk.master.store.users, which adds them)."""

    # --- tokens -----------------------------------------------------------------------

    def is_user_token(self, token: str) -> bool:
        return self.is_user_token_hash(hash_token(token))

    def is_user_token_hash(self, hashed: str) -> bool:
        """Whether ``hashed`` (``hash_token`` of a token) is an active user's token."""
        return self.token_user(hashed) is not None

    # --- web UI sessions (det_sdk.master.security.Sessions): ids and tokens hashed ------

    def create_ui_session(self, key: str, token_hash: str, now: float) -> None:
        self._exec("INSERT INTO ui_sessions VALUES (?, ?, ?, ?)", key, token_hash, now, now)

    def ui_session(self, key: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM ui_sessions WHERE id = ?", key)

    def touch_ui_session(self, key: str, now: float) -> None:
        self._exec("UPDATE ui_sessions SET last_seen = ? WHERE id = ?", now, key)

    def delete_ui_session(self, key: str) -> None:
        self._exec("DELETE FROM ui_sessions WHERE id = ?", key)

    def prune_ui_sessions(self, idle_before: float, created_before: float) -> None:
        """Forget sessions unused since ``idle_before`` or opened before ``created_before``."""
        self._exec("DELETE FROM ui_sessions WHERE last_seen < ? OR created < ?",
                    idle_before, created_before)
