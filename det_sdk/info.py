"""Where am I: the environment variables a cluster sets for the processes it launches.

Off the cluster none of them is set and :func:`get_cluster_info` returns ``None``.
A task launched by the master gets the whole protocol (named after Determined's)::

    DET_MASTER, DET_SESSION_TOKEN, DET_ALLOCATION_ID, DET_TASK_TYPE (TRIAL | GENERIC),
    DET_EXPERIMENT_ID, DET_TRIAL_ID, DET_TRIAL_SEED, DET_HPARAMS (JSON),
    DET_LATEST_CHECKPOINT, DET_EXPERIMENT_CONFIG (JSON),
    DET_SLOT_IDS (JSON list), DET_CONTAINER_ADDRS (JSON list), DET_CONTAINER_RANK,
    DET_CLUSTER_ID, DET_USER_DATA (JSON)

The container fields follow Determined's launch model: ``slot_ids`` are this node's
slots, ``container_addrs`` every node's address (the chief's first) and
``container_rank`` this node's index; a launcher starts ``len(slot_ids)`` workers.

>>> get_cluster_info({}) is None
True

``DET_ALLOCATION_ID`` is the marker: ``DET_MASTER`` alone is what a user sets on a
laptop to point the CLI at a master, and must not make a local run look like a trial.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from det_sdk.errors import StateError, UsageError

__all__ = ["ClusterInfo", "TrialInfo", "get_cluster_info"]


@dataclass(frozen=True)
class TrialInfo:
    """The trial part of :class:`ClusterInfo`, under Determined's names (``info.trial``)."""

    trial_id: int
    experiment_id: int | None
    trial_seed: int
    hparams: dict[str, Any] = dataclasses.field(default_factory=dict)
    config: dict[str, Any] = dataclasses.field(default_factory=dict)


class ClusterInfo(BaseModel):
    """What the master told this process about the task it runs."""

    model_config = ConfigDict(frozen=True)

    master_url: str
    session_token: str
    allocation_id: str
    task_type: Literal["TRIAL", "GENERIC", "COMMAND"]  # COMMAND: det cmd run (issue 58)
    experiment_id: int | None = None
    trial_id: int | None = None
    trial_seed: int = 0
    hparams: dict[str, Any] = {}
    latest_checkpoint: str | None = None
    config: dict[str, Any] = {}
    slot_ids: list[int] = [0]
    container_addrs: list[str] = ["127.0.0.1"]
    container_rank: int = 0
    cluster_id: str = ""
    user_data: dict[str, Any] = {}

    @property
    def trial(self) -> TrialInfo:
        """``info.trial.trial_id``, ``.hparams``, ... as Determined's scripts read them.

        >>> ClusterInfo(master_url="", session_token="", allocation_id="a", task_type="TRIAL",
        ...             trial_id=3).trial.trial_id
        3
        """
        if self.task_type != "TRIAL" or self.trial_id is None:
            raise StateError(f"info.trial: this task is a {self.task_type} task, not a trial")
        return TrialInfo(trial_id=self.trial_id, experiment_id=self.experiment_id,
                         trial_seed=self.trial_seed, hparams=dict(self.hparams),
                         config=dict(self.config))


_ENV = {
    "master_url": "DET_MASTER",
    "session_token": "DET_SESSION_TOKEN",
    "allocation_id": "DET_ALLOCATION_ID",
    "task_type": "DET_TASK_TYPE",
    "experiment_id": "DET_EXPERIMENT_ID",
    "trial_id": "DET_TRIAL_ID",
    "trial_seed": "DET_TRIAL_SEED",
    "hparams": "DET_HPARAMS",
    "latest_checkpoint": "DET_LATEST_CHECKPOINT",
    "config": "DET_EXPERIMENT_CONFIG",
    "slot_ids": "DET_SLOT_IDS",
    "container_addrs": "DET_CONTAINER_ADDRS",
    "container_rank": "DET_CONTAINER_RANK",
    "cluster_id": "DET_CLUSTER_ID",
    "user_data": "DET_USER_DATA",
}
_JSON_FIELDS = ("hparams", "config", "slot_ids", "container_addrs", "user_data")


def get_cluster_info(environ: Mapping[str, str] | None = None) -> ClusterInfo | None:
    """The cluster's description of this task, or ``None`` when not launched by a master.

    Raises ``ValueError`` naming the variable when the protocol is set but malformed.
    """
    env = os.environ if environ is None else environ
    if not env.get("DET_ALLOCATION_ID"):
        return None
    raw: dict[str, Any] = {}
    for field, var in _ENV.items():
        value = env.get(var)
        if value in (None, ""):
            continue
        if field in _JSON_FIELDS:
            try:
                value = json.loads(value)
            except json.JSONDecodeError as err:
                raise UsageError(f"{var} is not valid JSON: {err}") from None
        raw[field] = value
    try:
        return ClusterInfo.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(
            f"{_ENV.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in err.errors()
        )
        raise UsageError(f"incomplete cluster environment: {problems}") from None
