"""``torchrun``'s ranks (also ``det_sdk.launch.torch_distributed``'s): ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``GROUP_WORLD_SIZE``, and the process group's store at ``MASTER_ADDR:MASTER_PORT``
(served by torchrun's agent where ``TORCHELASTIC_USE_AGENT_STORE`` says so, else by rank 0).

>>> r = read({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
>>> r.local_rank, r.cross_rank, r.cross_size, r.chief_addr
(3, 1, 2, None)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from det_sdk.ranks._value import Ranks

__all__ = ["RANK_VAR", "agent_store", "launched", "read", "restart_count"]

RANK_VAR = "RANK"
SIZE_VAR = "WORLD_SIZE"


def launched(environ: Mapping[str, str] | None = None) -> bool:
    """True where ``WORLD_SIZE`` is set and ``RANK`` is present."""
    env = os.environ if environ is None else environ
    return bool(env.get(SIZE_VAR) and env.get(RANK_VAR) is not None)


def read(environ: Mapping[str, str] | None = None) -> Ranks | None:
    """The ranks torchrun describes, or None outside it. Unset local and group variables
    mean one node; ``chief_addr``/``chief_port`` are ``MASTER_ADDR``/``MASTER_PORT``
    (None when unset: the caller says what is missing)."""
    env = os.environ if environ is None else environ
    if not launched(env):
        return None
    size, rank = int(env[SIZE_VAR]), int(env[RANK_VAR])
    local_size = int(env.get("LOCAL_WORLD_SIZE", size))
    port = env.get("MASTER_PORT")
    return Ranks(rank=rank, size=size, local_rank=int(env.get("LOCAL_RANK", rank)),
                 local_size=local_size,
                 cross_rank=int(env.get("GROUP_RANK", rank // max(local_size, 1))),
                 cross_size=int(env.get("GROUP_WORLD_SIZE", max(1, size // max(local_size, 1)))),
                 chief_addr=env.get("MASTER_ADDR") or None,
                 chief_port=int(port) if port else None, launcher="torchrun")


def restart_count(environ: Mapping[str, str] | None = None) -> str:
    """How many times torchrun restarted the group (``TORCHELASTIC_RESTART_COUNT``, "0")."""
    env = os.environ if environ is None else environ
    return env.get("TORCHELASTIC_RESTART_COUNT", "0")


def agent_store(environ: Mapping[str, str] | None = None) -> bool:
    """True where torchrun's agent serves the store at ``MASTER_ADDR:MASTER_PORT``
    (``TORCHELASTIC_USE_AGENT_STORE=True``, as torchrun sets it): every rank is then its
    client. Otherwise (``det_sdk.launch.torch_distributed``, a script's own variables)
    rank 0 serves it.

    >>> agent_store({"TORCHELASTIC_USE_AGENT_STORE": "True"}), agent_store({})
    (True, False)
    """
    env = os.environ if environ is None else environ
    return env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
