"""The master's experiments: their rows, states and configs, and their page."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any, cast

from det_sdk.master.errors import Conflict
from det_sdk.master.rows import ExperimentRow, ExperimentSummaryRow
from det_sdk.master.store.database import Database, before, config_json, inserted

__all__ = ["ExperimentTables"]


class ExperimentTables(Database):
    """The ``experiments`` table (with the trials an experiment is created with)."""

    def experiment(self, exp_id: int) -> ExperimentRow | None:
        return self._one("SELECT * FROM experiments WHERE id = ?", exp_id)

    def experiments(self) -> list[ExperimentRow]:
        return self._all("SELECT * FROM experiments ORDER BY id")

    def experiment_ids_not_in(self, states: Sequence[str]) -> list[int]:
        """Ids of the experiments whose state is none of ``states``, oldest first."""
        marks = ",".join("?" * len(states))
        return [r["id"] for r in self._all(
            f"SELECT id FROM experiments WHERE state NOT IN ({marks}) ORDER BY id", *states)]

    def set_experiment_state(self, exp_id: int, state: str) -> None:
        ended = time.time() if state in ("COMPLETED", "CANCELED", "ERROR") else None
        self._exec("UPDATE experiments SET state = ?, ended = ? WHERE id = ?", state, ended,
                   exp_id)

    def set_experiment_config(self, exp_id: int, config: dict[str, Any]) -> None:
        """Its active config (``det e continue``), with the name it carries."""
        self._exec("UPDATE experiments SET name = ?, config = ? WHERE id = ?",
                   config.get("name"), config_json(config), exp_id)

    def create_experiment_with_trials(
        self, config: dict[str, Any], archive: str, trials: list[dict[str, Any]],
        owner_id: int | None = None, project_id: int = 1,
    ) -> int:
        """An experiment and all its trials (``hparams``, ``seed``, ``bracket``, ``target``),
        in one transaction: a crash leaves all of them or none. ``owner_id``: the user who
        created it (None: the first admin); ``project_id``: its project (1: the default,
        Uncategorized)."""
        with self.tx() as db:
            # checked again in the transaction: the project may have been deleted or
            # archived since the request was checked (det_sdk.master.store.workspaces)
            if project_id != 1 and not db.execute(
                    "SELECT 1 FROM projects p JOIN workspaces w ON p.workspace_id = w.id"
                    " WHERE p.id = ? AND p.archived = 0 AND w.archived = 0",
                    (project_id,)).fetchone():
                raise Conflict(f"project_id: project {project_id} is gone or archived")
            cur = db.execute(
                "INSERT INTO experiments (name, config, state, archive, created, owner_id,"
                " project_id) VALUES (?, ?, 'ACTIVE', ?, ?, ?, ?)",
                (config.get("name"), config_json(config), archive, time.time(), owner_id,
                 project_id),
            )
            exp_id = inserted(cur)
            for t in trials:
                db.execute(
                    "INSERT INTO trials (experiment_id, hparams, seed, state, created, bracket,"
                    " target) VALUES (?, ?, ?, 'QUEUED', ?, ?, ?)",
                    (exp_id, config_json(t["hparams"]), t["seed"], time.time(), t["bracket"],
                     t["target"]),
                )
            return exp_id

    def experiments_in_states(self, states: Collection[str]) -> list[ExperimentRow]:
        marks = ", ".join("?" for _ in states)
        return self._all(f"SELECT * FROM experiments WHERE state IN ({marks}) ORDER BY id",
                         *[str(getattr(s, "value", s)) for s in states])

    # --- pages (det_sdk.master.pages): keyset reads ------------------------------------------
    # Each reads one page in a fixed number of statements, whatever the history holds:
    # ``WHERE key < last ORDER BY key DESC LIMIT n`` walks an index from the cursor, where
    # OFFSET would read and drop every row before the page.

    def experiment_page(self, before_id: int | None, limit: int,
                        archived: bool | None = None, owners: list[int] | None = None,
                        projects: list[int] | None = None
                        ) -> tuple[list[ExperimentSummaryRow], int]:
        """Up to ``limit`` experiments with ids below ``before_id`` (from the newest if
        None), newest first, each with its trials' counts by state, mean progress and best
        metrics; and how many experiments there are. Three statements. ``archived``:
        only the archived (True) or the others (False); None: all. ``owners``: only
        those of these user ids (an owner NULL is the first admin, 1); None: all.
        ``projects``: only those in these project ids; None: all.

        >>> from det_sdk.master.store import Store
        >>> s = Store(":memory:")
        >>> _ = [s.create_experiment_with_trials({"name": n}, "a", []) for n in "xyz"]
        >>> rows, total = s.experiment_page(None, 2)
        >>> [r["name"] for r in rows], total
        (['z', 'y'], 3)
        """
        archived_filter = "" if archived is None else " AND archived = ?"
        archived_arg: tuple[int, ...] = () if archived is None else (int(archived),)
        if owners is not None:
            archived_filter += (" AND COALESCE(owner_id, 1) IN"
                                f" ({', '.join('?' for _ in owners) or 'NULL'})")
            archived_arg += tuple(owners)
        if projects is not None:  # only those in these projects (issue 59)
            archived_filter += (" AND project_id IN"
                                f" ({', '.join('?' for _ in projects) or 'NULL'})")
            archived_arg += tuple(projects)
        with self._lock:
            exps = [dict(r) for r in self._db.execute(
                "SELECT id, name, state, created, ended,"
                " json_extract(config, '$.searcher.name') AS searcher,"
                " json_extract(config, '$.searcher.metric') AS metric,"
                " json_extract(config, '$.searcher.smaller_is_better') AS smaller_is_better,"
                " archived, owner_id, project_id FROM experiments WHERE id < ?"
                f"{archived_filter} ORDER BY id DESC LIMIT ?",
                (before(before_id), *archived_arg, limit))]
            aggregates = self._db.execute(
                "SELECT experiment_id, state, COUNT(*), SUM(progress), MIN(best_metric),"
                " MAX(best_metric) FROM trials WHERE experiment_id IN"
                f" ({', '.join('?' for _ in exps)}) GROUP BY experiment_id, state",
                [e["id"] for e in exps]).fetchall() if exps else []
            (total,) = self._db.execute(
                f"SELECT COUNT(*) FROM experiments WHERE 1{archived_filter}",
                archived_arg).fetchone()
        by_id = {e["id"]: e for e in exps}
        for e in exps:
            e.update(trial_states={}, trials=0, progress=0.0, best_min=None, best_max=None)
        for exp_id, state, n, progress, lo, hi in aggregates:
            e = by_id[exp_id]
            e["trial_states"][state] = n
            e["trials"] += n
            e["progress"] += progress or 0.0
            e["best_min"] = lo if e["best_min"] is None or (
                lo is not None and lo < e["best_min"]) else e["best_min"]
            e["best_max"] = hi if e["best_max"] is None or (
                hi is not None and hi > e["best_max"]) else e["best_max"]
        for e in exps:
            e["progress"] = e["progress"] / e["trials"] if e["trials"] else 0.0
        # SQLite's rows are plain dicts of exactly the row type's columns
        return cast("list[ExperimentSummaryRow]", exps), int(total)
