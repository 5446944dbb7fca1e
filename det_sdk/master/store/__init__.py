"""The master's state: one SQLite file (WAL), safe to use from the server's threads.

Everything the master knows survives a restart: experiments, trials and their
processes, metrics (one value per trial, group and step), checkpoints, jobs, tokens.

:class:`Store` is one connection (det_sdk.master.store.database: the schema and the
transactions) with the methods of each table family, one module each, as the routers
are by resource: ``experiments``, ``trials`` (with the searcher's rungs), ``jobs``,
``allocations``, ``metrics``, ``checkpoints``, ``tokens`` (with the web UI's sessions).

>>> s = Store(":memory:")
>>> exp = s.create_experiment_with_trials({"name": "x"}, "/tmp/a.tgz", [])
>>> s.experiment(exp)["state"]
'ACTIVE'
"""

from det_sdk.master.store.allocations import AllocationTables
from det_sdk.master.store.checkpoints import CheckpointTables
from det_sdk.master.store.counts import CountTables
from det_sdk.master.store.database import hash_token
from det_sdk.master.store.experiments import ExperimentTables
from det_sdk.master.store.jobs import JobTables
from det_sdk.master.store.metrics import MetricTables
from det_sdk.master.store.roles import RoleTables
from det_sdk.master.store.system_metrics import SystemMetricTables
from det_sdk.master.store.tokens import TokenTables
from det_sdk.master.store.trials import TrialTables
from det_sdk.master.store.workspaces import WorkspaceTables

__all__ = ["Store", "hash_token"]


class Store(ExperimentTables, TrialTables, JobTables, AllocationTables, MetricTables,
            CheckpointTables, TokenTables, CountTables,
            SystemMetricTables,
            WorkspaceTables,  # workspaces and projects (issue 59)
            RoleTables):  # role assignments (issue 59)
    """Thin, typed access to the master's SQLite database."""
