"""``horovodrun``'s ranks: ``HOROVOD_RANK``, ``HOROVOD_SIZE`` and their local and cross
variants (also how the master and its Slurm step start a trial's ranks), and Gloo's
rendezvous store (``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``PORT``).

>>> read({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}).local_size
2
>>> read({}) is None
True
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from det_sdk.ranks._value import Ranks

__all__ = ["RANK_VAR", "gloo_rendezvous", "hostname", "launched", "read"]

RANK_VAR = "HOROVOD_RANK"
SIZE_VAR = "HOROVOD_SIZE"


def launched(environ: Mapping[str, str] | None = None) -> bool:
    """True in a process started by ``horovodrun`` (it sets ``HOROVOD_RANK``/``SIZE``)."""
    env = os.environ if environ is None else environ
    return all(env.get(v) for v in (RANK_VAR, SIZE_VAR))


def read(environ: Mapping[str, str] | None = None) -> Ranks | None:
    """The ranks ``horovodrun`` describes, or None outside it. Unset local and cross
    variables mean one node (local rank = rank, local size = size)."""
    env = os.environ if environ is None else environ
    if not launched(env):
        return None
    rank, size = int(env[RANK_VAR]), int(env[SIZE_VAR])
    return Ranks(rank=rank, size=size, local_rank=int(env.get("HOROVOD_LOCAL_RANK", rank)),
                 local_size=int(env.get("HOROVOD_LOCAL_SIZE", size)),
                 cross_rank=int(env.get("HOROVOD_CROSS_RANK", 0)),
                 cross_size=int(env.get("HOROVOD_CROSS_SIZE", 1)), launcher="horovodrun")


def gloo_rendezvous(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(address, port)`` of ``horovodrun --gloo``'s key-value store, or None.

    >>> gloo_rendezvous({"HOROVOD_GLOO_RENDEZVOUS_ADDR": "h", "HOROVOD_GLOO_RENDEZVOUS_PORT": "1"})
    ('h', '1')
    """
    env = os.environ if environ is None else environ
    addr, port = env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"), env.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    return (addr, port) if addr and port else None


def hostname(environ: Mapping[str, str] | None = None) -> str | None:
    """The host name ``horovodrun`` gave this rank (``HOROVOD_HOSTNAME``), or None."""
    env = os.environ if environ is None else environ
    return env.get("HOROVOD_HOSTNAME") or None
