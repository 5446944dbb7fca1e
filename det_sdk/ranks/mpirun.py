"""Open MPI's ``mpirun`` ranks: ``OMPI_COMM_WORLD_RANK``, ``..._SIZE``, ``..._LOCAL_RANK``,
``..._LOCAL_SIZE``, ``..._NODE_RANK``.

>>> read({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}).local_size
2
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from det_sdk.ranks._value import Ranks

__all__ = ["RANK_VAR", "read"]

RANK_VAR = "OMPI_COMM_WORLD_RANK"
_PREFIX = "OMPI_COMM_WORLD_"


def read(environ: Mapping[str, str] | None = None) -> Ranks | None:
    """The ranks ``mpirun`` describes, or None outside it (unset local variables: one node)."""
    env = os.environ if environ is None else environ
    if not env.get(RANK_VAR, "").isdigit() or not env.get(_PREFIX + "SIZE"):
        return None
    rank, size = int(env[RANK_VAR]), int(env[_PREFIX + "SIZE"])
    local_size = int(env.get(_PREFIX + "LOCAL_SIZE", size))
    return Ranks(rank=rank, size=size, local_rank=int(env.get(_PREFIX + "LOCAL_RANK", rank)),
                 local_size=local_size, cross_rank=int(env.get(_PREFIX + "NODE_RANK", 0)),
                 cross_size=max(1, -(-size // max(local_size, 1))), launcher="mpirun")
