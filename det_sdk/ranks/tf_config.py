"""TensorFlow's ``TF_CONFIG`` (what ``det_sdk.launch.tensorflow``, Determined's TensorFlow
launcher, gives each worker), with the launcher's ``DET_TF_COLLECTIVE_ADDR`` (where the
chief's object collectives listen) and ``DET_TF_COLLECTIVE_TOKEN``.

>>> parse_tf_config('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"index": 1}}')
(['a:1', 'b:2'], 1)
>>> parse_tf_config(None)
([], 0)
>>> r = of_workers(["h:1", "h:3", "g:5"], 1, {})
>>> r.local_rank, r.local_size, r.cross_rank, r.cross_size, r.chief_addr, r.chief_port
(1, 2, 0, 2, 'h', 2)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from det_sdk.errors import UsageError
from det_sdk.ranks._value import Ranks

__all__ = ["COLLECTIVE_ADDR_VAR", "COLLECTIVE_FD_VAR", "COLLECTIVE_TOKEN_VAR", "TF_CONFIG_VAR",
           "collective_token", "of_workers", "parse_tf_config", "read"]

TF_CONFIG_VAR = "TF_CONFIG"
# Set by det_sdk.launch.tensorflow next to TF_CONFIG: where the chief's collectives
# listen ("host:port") and the token a worker shows when it connects.
COLLECTIVE_ADDR_VAR = "DET_TF_COLLECTIVE_ADDR"
COLLECTIVE_TOKEN_VAR = "DET_TF_COLLECTIVE_TOKEN"
# The chief's only: the descriptor of the socket the launcher already listens on at
# DET_TF_COLLECTIVE_ADDR, inherited through exec (a port named and bound later could be
# taken in between by any connection on the host).
COLLECTIVE_FD_VAR = "DET_TF_COLLECTIVE_FD"


def parse_tf_config(raw: str | None) -> tuple[list[str], int]:
    """``TF_CONFIG`` -> (worker addresses, this process's index); ``([], 0)`` when unset.

    Raises ``ValueError`` naming ``TF_CONFIG`` and the field when it is malformed.
    """
    if not raw:
        return [], 0
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as err:
        raise UsageError(f"TF_CONFIG is not valid JSON: {err}") from None
    workers = (cfg.get("cluster") or {}).get("worker") if isinstance(cfg, dict) else None
    if not isinstance(workers, list) or not workers or not all(
            isinstance(w, str) and ":" in w for w in workers):
        raise UsageError("TF_CONFIG: cluster.worker must be a non-empty list of 'host:port'")
    task = cfg.get("task") or {}
    index = task.get("index", 0)
    if task.get("type", "worker") != "worker" or not isinstance(index, int) \
            or not 0 <= index < len(workers):
        raise UsageError(f"TF_CONFIG: task must be a worker with an index in [0, {len(workers)}), "
                         f"got {task!r}")
    return list(workers), index


def of_workers(workers: list[str], index: int,
               environ: Mapping[str, str] | None = None) -> Ranks:
    """Worker ``index``'s ranks among ``workers`` (``TF_CONFIG``'s ``host:port`` list): its
    local ranks among the workers on its host, its cross rank among the hosts in order
    of first appearance, and the chief's collectives at ``DET_TF_COLLECTIVE_ADDR`` (for a
    ``TF_CONFIG`` someone else wrote: the port after the chief worker's)."""
    env = os.environ if environ is None else environ
    hosts = [w.rsplit(":", 1)[0] for w in workers]
    mine = hosts[index]
    unique = list(dict.fromkeys(hosts))
    addr = env.get(COLLECTIVE_ADDR_VAR)
    if not addr:
        chief_host, chief_port = workers[0].rsplit(":", 1)
        addr = f"{chief_host}:{int(chief_port) + 1}"
    host, port = addr.rsplit(":", 1)
    return Ranks(rank=index, size=len(workers),
                 local_rank=sum(1 for h in hosts[:index] if h == mine),
                 local_size=hosts.count(mine), cross_rank=unique.index(mine),
                 cross_size=len(unique), chief_addr=host, chief_port=int(port),
                 launcher="tf_config")


def read(environ: Mapping[str, str] | None = None) -> Ranks | None:
    """The ranks ``TF_CONFIG`` describes, or None when it is unset."""
    env = os.environ if environ is None else environ
    workers, index = parse_tf_config(env.get(TF_CONFIG_VAR))
    return of_workers(workers, index, env) if workers else None


def collective_token(environ: Mapping[str, str] | None = None) -> str:
    """The token the launcher gave the workers (``DET_TF_COLLECTIVE_TOKEN``; "" unset)."""
    env = os.environ if environ is None else environ
    return env.get(COLLECTIVE_TOKEN_VAR, "")
