"""The environment variables det_sdk reads and writes, named once.

Four families, each named here and read here, but for two: a task's are read through
:func:`det_sdk.get_cluster_info`, and the ranks' (``DET_TF_COLLECTIVE_*`` among them) by
:mod:`det_sdk.ranks`:

- a **local run**'s (the user sets them): ``DET_CONFIG`` (the config's path),
  ``DET_RUNS_DIR`` (where runs live), ``DET_RESUME`` (continue run ID or ``latest``);
- a **task**'s, written by the master for the processes it launches and read through
  :func:`det_sdk.get_cluster_info` (``DET_ALLOCATION_ID`` marks them);
- the **ranks** launchers describe (horovodrun's ``HOROVOD_*``, torchrun's ``RANK``,
  ``WORLD_SIZE``, ..., ``TF_CONFIG``): named here for :func:`outside`, read only by
  :mod:`det_sdk.ranks`, one module per launcher (``tests/unit/test_ranks.py`` checks);
- the **user's settings** for the ``det`` CLI and det_sdk's tools: ``DET_MASTER``,
  ``DET_USER_TOKEN``, ``DET_CREDENTIALS``, ``DET_MASTER_DIR``, ``DET_TORCH_TIMEOUT``,
  ``DET_SLURM_RENDEZVOUS_ADDR``, ``DET_COLLECTIVE_TIMEOUT``, ``DET_JAX_TIMEOUT``,
  ``DET_PASS`` (`det user login` without a terminal), ``DET_SIGNIN_WINDOW`` (the master's).

Processes that must start outside any of them (the master's tasks, a test's fresh
script) take :func:`outside`.

>>> local_run({"DET_RESUME": "latest"}).resume
'latest'
>>> sorted(outside({"DET_RESUME": "3", "HOROVOD_RANK": "0", "PATH": "/bin"}))
['PATH']
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from det_sdk.errors import UsageError

__all__ = ["LOCAL_RUN_VARS", "RANK_VARS", "TASK_VARS", "LocalRunEnv", "collective_token",
           "local_run", "outside", "port_offset", "setting", "task_owner"]

CONFIG = "DET_CONFIG"
RUNS_DIR = "DET_RUNS_DIR"
RESUME = "DET_RESUME"
#: a local run's own variables
LOCAL_RUN_VARS = (CONFIG, RUNS_DIR, RESUME)
#: what the master writes for a task (besides the config's environment_variables);
#: DET_MASTER alone is not one of them: it is also how a user points the CLI at a master
TASK_VARS = (
    "DET_SESSION_TOKEN", "DET_ALLOCATION_ID", "DET_TASK_TYPE", "DET_EXPERIMENT_ID",
    "DET_TRIAL_ID", "DET_TRIAL_SEED", "DET_HPARAMS", "DET_LATEST_CHECKPOINT",
    "DET_EXPERIMENT_CONFIG", "DET_SLOT_IDS", "DET_CONTAINER_ADDRS", "DET_CONTAINER_RANK",
    "DET_CLUSTER_ID", "DET_USER_DATA", "DET_UNIQUE_PORT_OFFSET", "DET_COLLECTIVE_TOKEN",
    "DET_FAILURE_RECORD_DIR",
)
#: a user's own login token: a task gets its own, never the user's
USER_TOKEN = "DET_USER_TOKEN"
#: what launchers set to describe a process's rank among others (det_sdk.ranks reads them)
RANK_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG", "DET_TF_COLLECTIVE_ADDR",
    "DET_TF_COLLECTIVE_TOKEN",
)
_RANK_PREFIXES = ("HOROVOD_", "OMPI_", "PMI_")


class LocalRunEnv:
    """A local run's variables, as given (None when unset or empty).

    A plain class, not a dataclass: ``dataclasses`` imports ``inspect``, about a third of
    the ``det`` CLI's start-up (the goal: ``det --help`` within 2x ``python -c pass``).

    >>> LocalRunEnv(config="const.yaml", runs_dir=None, resume="latest").resume
    'latest'
    """

    __slots__ = ("config", "resume", "runs_dir")

    def __init__(self, config: str | None, runs_dir: str | None, resume: str | None) -> None:
        self.config, self.runs_dir, self.resume = config, runs_dir, resume

    def __repr__(self) -> str:
        return (f"LocalRunEnv(config={self.config!r}, runs_dir={self.runs_dir!r}, "
                f"resume={self.resume!r})")


def local_run(environ: Mapping[str, str] | None = None) -> LocalRunEnv:
    """``DET_CONFIG``, ``DET_RUNS_DIR`` and ``DET_RESUME`` (None when unset or empty)."""
    env = os.environ if environ is None else environ
    return LocalRunEnv(config=env.get(CONFIG) or None, runs_dir=env.get(RUNS_DIR) or None,
                       resume=env.get(RESUME) or None)


def outside(environ: Mapping[str, str] | None = None, *, keep: Iterable[str] = (),
            **extra: str) -> dict[str, str]:
    """``environ`` without any run's, task's or rank's variables, then ``extra`` on top.

    For a process that must start as if from a plain shell: a master's task (which
    gets its own protocol), a test's fresh script, a launcher's worker before its rank
    is set. ``keep`` names variables to leave in place.
    """
    env = os.environ if environ is None else environ
    kept = set(keep)
    # a password is a secret as the user token is: never handed to a task
    drop = {*LOCAL_RUN_VARS, *TASK_VARS, USER_TOKEN, "DET_PASS", *RANK_VARS} - kept
    out = {k: v for k, v in env.items()
           if k in kept or (k not in drop and not k.startswith(_RANK_PREFIXES))}
    out.update(extra)
    return out


#: the user's settings (:func:`setting` reads them)
SETTINGS = ("DET_MASTER", "DET_USER_TOKEN", "DET_CREDENTIALS", "DET_MASTER_DIR",
            "DET_TORCH_TIMEOUT", "DET_SLURM_RENDEZVOUS_ADDR", "DET_COLLECTIVE_TIMEOUT",
            "DET_JAX_TIMEOUT",
            # a password for `det user login` with no terminal (Determined's), and the
            # master's sign-in lockout window in seconds (det_sdk.master.passwords)
            "DET_PASS", "DET_SIGNIN_WINDOW")


def setting(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """One of the user's :data:`SETTINGS` (None when unset or empty).

    >>> setting("DET_MASTER", {"DET_MASTER": "http://m:8080"})
    'http://m:8080'
    """
    if name not in SETTINGS:
        raise UsageError(f"{name} is not one of det_sdk's settings {SETTINGS}")
    env = os.environ if environ is None else environ
    return env.get(name) or None


def task_owner(environ: Mapping[str, str] | None = None) -> dict[str, object] | None:
    """The master's task this process belongs to (``allocation_id``, ``trial_id``), or
    None off the cluster: what a checkpoint's owner file records.

    >>> task_owner({"DET_ALLOCATION_ID": "a1", "DET_TRIAL_ID": "7"})
    {'allocation_id': 'a1', 'trial_id': 7}
    """
    env = os.environ if environ is None else environ
    alloc = env.get("DET_ALLOCATION_ID")
    if not alloc:
        return None
    trial = env.get("DET_TRIAL_ID", "")
    return {"allocation_id": alloc, "trial_id": int(trial) if trial.isdigit() else None}


def port_offset(environ: Mapping[str, str] | None = None) -> int:
    """``DET_UNIQUE_PORT_OFFSET``: what a task adds to its ports (0 off the cluster)."""
    env = os.environ if environ is None else environ
    return int(env.get("DET_UNIQUE_PORT_OFFSET", "0") or 0)


def collective_token(environ: Mapping[str, str] | None = None) -> str:
    """``DET_COLLECTIVE_TOKEN``: the token a task's ranks show their chief ("" unset)."""
    env = os.environ if environ is None else environ
    return env.get("DET_COLLECTIVE_TOKEN", "")
