"""How many experiments, trials, jobs and allocations are in each state (the Prometheus
scrape, issue 60): one ``GROUP BY`` a table, never the rows themselves.

>>> from det_sdk.master.store import Store
>>> s = Store(":memory:")
>>> _ = s.create_experiment_with_trials({"name": "x"}, "/tmp/a.tgz", [])
>>> s.state_counts("experiments")
{'ACTIVE': 1}
"""

from __future__ import annotations

from det_sdk.errors import UsageError
from det_sdk.master.store.database import Database

__all__ = ["CountTables"]

_COUNTED = ("experiments", "trials", "jobs", "allocations")


class CountTables(Database):
    """Counts by state of the tables that have one."""

    def state_counts(self, table: str) -> dict[str, int]:
        """``{state: rows}`` of ``table`` (one of experiments, trials, jobs, allocations)."""
        if table not in _COUNTED:  # a name in SQL: only these
            raise UsageError(f"table: expected one of {', '.join(_COUNTED)}, got {table!r}")
        rows = self._all(f"SELECT state, COUNT(*) AS n FROM {table} GROUP BY state")
        return {r["state"]: int(r["n"]) for r in rows}

    def running_slots(self) -> int:
        """The slots the running allocations hold."""
        found = self._one("SELECT COALESCE(SUM(slots), 0) AS n FROM allocations "
                          "WHERE state = 'RUNNING'")
        return int(found["n"]) if found else 0
