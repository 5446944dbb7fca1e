"""The master's trials and the searcher's state of each (its rung results), and their
pages."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any, cast

from det_sdk.master.rows import TrialRow
from det_sdk.master.store.database import Database, config_json, row

__all__ = ["TrialTables"]


class TrialTables(Database):
    """The ``trials`` and ``rungs`` tables."""

    def trial(self, trial_id: int) -> TrialRow | None:
        return self._one("SELECT * FROM trials WHERE id = ?", trial_id)

    def trials(self, exp_id: int | None = None) -> list[TrialRow]:
        if exp_id is None:
            return self._all("SELECT * FROM trials ORDER BY id")
        return self._all("SELECT * FROM trials WHERE experiment_id = ? ORDER BY id", exp_id)

    def trials_in_states(self, states: Collection[str], exp_id: int | None = None,
                         limit: int = -1) -> list[TrialRow]:
        """The trials in any of ``states`` (of one experiment), oldest first, at most
        ``limit`` (the scheduler's view: it must not decode 10,000 trials every second)."""
        marks = ", ".join("?" for _ in states)
        args: list[Any] = [str(getattr(s, "value", s)) for s in states]
        where = f"state IN ({marks})"
        if exp_id is not None:
            where += " AND experiment_id = ?"
            args.append(exp_id)
        return self._all(f"SELECT * FROM trials WHERE {where} ORDER BY id LIMIT ?", *args,
                         limit)

    def trial_counts(self, states: Collection[str]) -> dict[int, int]:
        """How many trials of each experiment are in any of ``states``."""
        marks = ", ".join("?" for _ in states)
        with self._lock:
            rows = self._db.execute(
                f"SELECT experiment_id, COUNT(*) FROM trials WHERE state IN ({marks})"
                " GROUP BY experiment_id", [str(getattr(s, "value", s)) for s in states])
            return dict(rows.fetchall())

    def update_trial(self, trial_id: int, **fields: Any) -> None:
        if not fields:
            return
        if fields.get("state") in ("COMPLETED", "CANCELED", "ERROR"):
            fields.setdefault("ended", time.time())
        if isinstance(fields.get("hparams"), dict):  # as the column keeps them
            fields["hparams"] = config_json(fields["hparams"])
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._exec(f"UPDATE trials SET {cols} WHERE id = ?", *fields.values(), trial_id)

    # --- searcher state ---------------------------------------------------------------------

    def rung_result(self, trial_id: int, rung: int) -> dict[str, Any] | None:
        return self._one("SELECT * FROM rungs WHERE trial_id = ? AND rung = ?", trial_id, rung)

    def trial_rungs(self, trial_id: int) -> list[dict[str, Any]]:
        """The trial's results at each rung it reached, with the searcher's decisions."""
        return [_rung_entry(r)
                for r in self._all("SELECT * FROM rungs WHERE trial_id = ? ORDER BY rung",
                                   trial_id)]

    def experiment_rungs(self, exp_id: int) -> dict[int, list[dict[str, Any]]]:
        """:meth:`trial_rungs` of every trial of an experiment, by trial id, in one query."""
        out: dict[int, list[dict[str, Any]]] = {}
        for r in self._all("SELECT r.* FROM rungs r JOIN trials t ON t.id = r.trial_id"
                           " WHERE t.experiment_id = ? ORDER BY r.trial_id, r.rung", exp_id):
            out.setdefault(r["trial_id"], []).append(_rung_entry(r))
        return out

    def rung_results(self, exp_id: int, bracket: int, rung: int) -> list[dict[str, Any]]:
        """A rung's results in the order they arrived."""
        return self._all(
            "SELECT r.* FROM rungs r JOIN trials t ON t.id = r.trial_id"
            " WHERE t.experiment_id = ? AND t.bracket = ? AND r.rung = ? ORDER BY r.seq",
            exp_id, bracket, rung)

    def record_rung(self, trial_id: int, rung: int, metric: float, promoted: bool,
                    target: int | None) -> None:
        """A trial's result at a rung and the decision, with its new target, atomically."""
        with self.tx() as db:
            (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM rungs").fetchone()
            db.execute("INSERT INTO rungs VALUES (?, ?, ?, ?, ?)",
                       (trial_id, rung, metric, int(promoted), seq))
            if promoted:
                db.execute("UPDATE trials SET target = ? WHERE id = ?", (target, trial_id))
            else:
                db.execute("UPDATE trials SET searcher_done = 1 WHERE id = ?", (trial_id,))

    def best_trials(self, exp_id: int, limit: int, smaller_is_better: bool = True
                    ) -> tuple[list[int], int]:
        """The ids of the experiment's ``limit`` best trials by ``best_metric`` (trials
        without one last, ties by id), in id order; and how many trials it has.

        Two statements, both on the ``trials_summary`` index alone (it holds
        ``best_metric``): the best are a top-``limit`` sort of the experiment's index
        entries, never of its metric rows.

        >>> from det_sdk.master.store import Store
        >>> s = Store(":memory:")
        >>> exp = s.create_experiment_with_trials({}, "a", [
        ...     {"hparams": {}, "seed": 0, "bracket": 0, "target": None}] * 4)
        >>> for t, m in zip(s.trials(exp), [0.3, None, 0.1, 0.2]):
        ...     s.update_trial(t["id"], best_metric=m)
        >>> s.best_trials(exp, 2)
        ([3, 4], 4)
        >>> s.best_trials(exp, 3, smaller_is_better=False)
        ([1, 3, 4], 4)
        """
        order = "" if smaller_is_better else " DESC"
        with self._lock:
            ids = [r[0] for r in self._db.execute(
                "SELECT id FROM trials WHERE experiment_id = ?"
                f" ORDER BY best_metric IS NULL, best_metric{order}, id LIMIT ?",
                (exp_id, limit))]
            (total,) = self._db.execute(
                "SELECT COUNT(*) FROM trials WHERE experiment_id = ?", (exp_id,)).fetchone()
        return sorted(ids), int(total)

    def trial_page(self, exp_id: int, after_id: int | None, limit: int
                   ) -> tuple[list[TrialRow], dict[int, list[dict[str, Any]]]]:
        """Up to ``limit`` trials of an experiment with ids above ``after_id``, in id order
        (the order the searcher created them), with their rung results by trial id. Two
        statements, both through an index."""
        with self._lock:
            trials = [row(r) for r in self._db.execute(
                "SELECT * FROM trials WHERE experiment_id = ? AND id > ? ORDER BY id LIMIT ?",
                (exp_id, -1 if after_id is None else after_id, limit))]
            rungs = self._db.execute(
                "SELECT * FROM rungs WHERE trial_id IN"
                f" ({', '.join('?' for _ in trials)}) ORDER BY trial_id, rung",
                [t["id"] for t in trials if t is not None]).fetchall() if trials else []
        out: dict[int, list[dict[str, Any]]] = {}
        for r in rungs:
            out.setdefault(r["trial_id"], []).append(_rung_entry(r))
        # SQLite's rows are plain dicts of exactly the row type's columns
        return cast("list[TrialRow]", trials), out

    def trial_state_counts(self, exp_id: int) -> tuple[dict[str, int], float]:
        """How many of an experiment's trials are in each state, and their mean progress."""
        with self._lock:
            rows = self._db.execute(
                "SELECT state, COUNT(*), SUM(progress) FROM trials WHERE experiment_id = ?"
                " GROUP BY state", (exp_id,)).fetchall()
        n = sum(r[1] for r in rows)
        return {r[0]: r[1] for r in rows}, (sum(r[2] or 0.0 for r in rows) / n if n else 0.0)


def _rung_entry(r: Any) -> dict[str, Any]:
    """A trial's result at a rung as the answers carry it (``r``: a ``rungs`` row)."""
    return {"rung": r["rung"], "metric": r["metric"], "promoted": bool(r["promoted"]),
            "order": r["seq"]}
