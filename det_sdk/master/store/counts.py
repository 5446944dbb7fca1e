"""How many experiments, trials, jobs and allocations are in each state (the Prometheus
scrape, issue 60): one ``GROUP BY`` a table, never the rows themselves.

>>> from det_sdk.master.store import Store
>>> s = Store(":memory:")
>>> _ = s.create_experiment_with_trials({"name": "x"}, "/tmp/a.tgz", [])
>>> s.state_counts("experiments")
{'ACTIVE': 1}
"""

from __future__ import annotations

from collections.abc import Collection

from det_sdk.errors import UsageError
from det_sdk.master.store.database import Database

__all__ = ["CountTables"]

_COUNTED = ("experiments", "trials", "jobs", "allocations")
_IN_WORKSPACES = ("experiments", "trials")  # what a role may hide (jobs are in none)


class CountTables(Database):
    """Counts by state of the tables that have one."""

    def state_counts(self, table: str, hidden: Collection[int] = ()) -> dict[str, int]:
        """``{state: rows}`` of ``table`` (one of experiments, trials, jobs, allocations);
        experiments and trials of workspaces ``hidden`` (ids) left out (roles, issue 59).

        >>> from det_sdk.master.store import Store
        >>> Store(":memory:").state_counts("trials", hidden=[2])
        {}
        """
        if table not in _COUNTED:  # a name in SQL: only these
            raise UsageError(f"table: expected one of {', '.join(_COUNTED)}, got {table!r}")
        if not hidden or table not in _IN_WORKSPACES:
            rows = self._all(f"SELECT state, COUNT(*) AS n FROM {table} GROUP BY state")
            return {r["state"]: int(r["n"]) for r in rows}
        ids = sorted({int(w) for w in hidden})
        marks = ", ".join("?" * len(ids))
        # an experiment's project is in a workspace (NULL: before workspaces, project 1)
        shown = ("COALESCE(e.project_id, 1) NOT IN (SELECT id FROM projects"
                 f" WHERE workspace_id IN ({marks}))")
        sql = (f"SELECT e.state, COUNT(*) AS n FROM experiments e WHERE {shown}"
               " GROUP BY e.state" if table == "experiments" else
               "SELECT t.state, COUNT(*) AS n FROM trials t JOIN experiments e"
               f" ON e.id = t.experiment_id WHERE {shown} GROUP BY t.state")
        return {r["state"]: int(r["n"]) for r in self._all(sql, *ids)}

    def running_slots(self) -> int:
        """The slots the running allocations hold."""
        found = self._one("SELECT COALESCE(SUM(slots), 0) AS n FROM allocations "
                          "WHERE state = 'RUNNING'")
        return int(found["n"]) if found else 0
