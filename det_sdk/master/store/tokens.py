"""The master's user tokens (kept hashed) and the web UI's sessions."""

from __future__ import annotations

import time
from typing import Any

from det_sdk.master.store.database import Database, hash_token

__all__ = ["TokenTables"]


class TokenTables(Database):
    """The ``user_tokens`` and ``ui_sessions`` tables."""

    # --- tokens -----------------------------------------------------------------------

    def add_user_token(self, token: str) -> None:
        hashed = hash_token(token)
        with self.tx() as db:
            # tokens stored in clear by earlier versions go: the token file re-adds its own
            db.execute("DELETE FROM user_tokens WHERE token NOT LIKE 'sha256:%'")
            db.execute("INSERT OR IGNORE INTO user_tokens VALUES (?, ?)", (hashed, time.time()))
        self._user_tokens.add(hashed)

    def is_user_token(self, token: str) -> bool:
        return self.is_user_token_hash(hash_token(token))

    def is_user_token_hash(self, hashed: str) -> bool:
        """Whether ``hashed`` (``hash_token`` of a token) is a user token's."""
        if hashed in self._user_tokens:
            return True
        if self._one("SELECT 1 AS ok FROM user_tokens WHERE token = ?", hashed) is not None:
            self._user_tokens.add(hashed)
            return True
        return False

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
