"""Slurm's ranks, for a process ``srun`` started directly: ``SLURM_PROCID``,
``SLURM_STEP_NUM_TASKS`` (else ``SLURM_NTASKS``), ``SLURM_LOCALID``, ``SLURM_NODEID``,
``SLURM_STEP_NUM_NODES`` (else ``SLURM_NNODES``). The master's Slurm step turns these
into ``horovodrun``'s variables for a trial's ranks (``master/resources/slurm_step.py``).

>>> r = read({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
...           "SLURM_NODEID": "1", "SLURM_NNODES": "2"})
>>> r.rank, r.size, r.local_rank, r.local_size, r.cross_rank, r.cross_size
(3, 4, 1, 2, 1, 2)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from det_sdk.ranks._value import Ranks

__all__ = ["RANK_VAR", "read"]

RANK_VAR = "SLURM_PROCID"


def read(environ: Mapping[str, str] | None = None) -> Ranks | None:
    """The ranks Slurm describes, or None outside a Slurm task. The local size is the
    tasks per node (``SLURM_NTASKS_PER_NODE``), else the tasks spread evenly."""
    env = os.environ if environ is None else environ
    if not env.get(RANK_VAR, "").isdigit():
        return None
    rank = int(env[RANK_VAR])
    size = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or rank + 1)
    nodes = int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or 1)
    per_node = env.get("SLURM_NTASKS_PER_NODE", "")
    local_size = int(per_node) if per_node.isdigit() else max(1, -(-size // nodes))
    return Ranks(rank=rank, size=size, local_rank=int(env.get("SLURM_LOCALID", 0)),
                 local_size=local_size, cross_rank=int(env.get("SLURM_NODEID", 0)),
                 cross_size=nodes, launcher="slurm")
