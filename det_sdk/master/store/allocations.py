"""The master's allocations: the running processes of trials and jobs, found by their
task tokens."""

from __future__ import annotations

from typing import Any

from det_sdk.master.rows import AllocationRow
from det_sdk.master.store.database import Database

__all__ = ["AllocationTables"]


class AllocationTables(Database):
    """The ``allocations`` table."""

    def allocation_by_token(self, token: str) -> AllocationRow | None:
        """The allocation a task token belongs to, with its state (cached until it changes)."""
        alloc = self._token_allocations.get(token)
        if alloc is None:
            alloc = self._one("SELECT * FROM allocations WHERE token = ?", token)
            if alloc is not None:
                self._token_allocations[token] = alloc
        return alloc

    # --- allocations (running processes) --------------------------------------------------

    def create_allocation(self, alloc: dict[str, Any]) -> None:
        cols = ", ".join(alloc)
        marks = ", ".join("?" for _ in alloc)
        self._exec(f"INSERT INTO allocations ({cols}) VALUES ({marks})", *alloc.values())

    def allocation(self, alloc_id: str) -> AllocationRow | None:
        return self._one("SELECT * FROM allocations WHERE id = ?", alloc_id)

    def running_allocations(self) -> list[AllocationRow]:
        return self._all("SELECT * FROM allocations WHERE state = 'RUNNING' ORDER BY started")

    def update_allocation(self, alloc_id: str, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._exec(f"UPDATE allocations SET {cols} WHERE id = ?", *fields.values(), alloc_id)
        # the token cache holds the state: a token must stop working when its task ends
        self._token_allocations = {
            t: a for t, a in self._token_allocations.items() if a["id"] != alloc_id}
