"""Determined's ``User`` of the Python SDK over det_sdk's master (issue 59): what
``client.whoami()``, ``get_user_by_name`` and ``list_users`` answer.

>>> u = User(None, {"id": 2, "username": "ann", "admin": False, "active": True,
...                 "display_name": ""})
>>> u.user_id, u.username, u.admin, u.remote
(2, 'ann', False, False)
"""

from __future__ import annotations

from typing import Any

__all__ = ["User"]


class User:
    """A user of the master (Determined's ``User``): changes are an admin's, but one's own
    password (the master answers 403 otherwise)."""

    def __init__(self, session: Any, row: dict[str, Any]) -> None:
        self._session = session
        self._hydrate(row)

    def __repr__(self) -> str:
        return f"User(user_id={self.user_id}, username={self.username!r})"

    def _hydrate(self, row: dict[str, Any]) -> None:
        self.user_id = int(row["id"])
        self.username = str(row["username"])
        self.admin = bool(row["admin"])
        self.active = bool(row["active"])
        self.display_name = str(row.get("display_name") or "")
        self.remote = False  # no external identity provider here

    def reload(self) -> None:
        self._hydrate(self._session.request("GET", f"/api/v1/users/{self.user_id}")["user"])

    def _patch(self, **fields: Any) -> None:
        out = self._session.request("PATCH", f"/api/v1/users/{self.user_id}", json=fields)
        self._hydrate(out["user"])

    def rename(self, new_username: str) -> None:
        self._patch(username=new_username)

    def activate(self) -> None:
        self._patch(active=True)

    def deactivate(self) -> None:
        """Its tokens and web UI sessions end at once."""
        self._patch(active=False)

    def change_display_name(self, display_name: str) -> None:
        self._patch(display_name=display_name)

    def change_password(self, new_password: str) -> None:
        out = self._session.request("POST", f"/api/v1/users/{self.user_id}/password",
                                    json={"password": new_password})
        self._hydrate(out["user"])
