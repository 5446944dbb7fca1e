"""Whether the processes hold the same arrays: content digests and one small allgather
(``wrap_data`` refuses arrays that differ; ``fit`` asks whether data is the same everywhere).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xxhash

from det_sdk.distributed import Processes
from det_sdk.errors import UsageError
from det_sdk.keras._data._arrays import _leaves


def _digest(a: np.ndarray) -> str:
    """A content digest of one array (shape, dtype and values)."""
    h = xxhash.xxh3_64(f"{a.shape}{a.dtype.str}".encode())
    if a.dtype.hasobject:  # strings, ragged rows: their text (object bytes are pointers)
        h.update("\x00".join(map(repr, a.ravel().tolist())).encode())
    elif a.size:  # (memoryview cannot cast an empty array's view)
        h.update(np.ascontiguousarray(a).data.cast("B"))
    return h.hexdigest()


def _digests_everywhere(dist: Processes, named: dict[str, Any]
                        ) -> tuple[dict[str, str], list[dict[str, str]]]:
    """This process's digest of each array in ``named`` (by name, ``x[1]`` for a list's
    second), and every process's (one digest per array, xxh3 at about 10 GB/s, and one
    small allgather)."""
    mine = {f"{name}[{i}]" if len(_leaves(struct)) > 1 else name: _digest(leaf)
            for name, struct in named.items() if struct is not None
            for i, leaf in enumerate(_leaves(struct))}
    return mine, dist.allgather(mine)


def same_everywhere(dist: Processes, named: dict[str, Any]) -> bool:
    """True when every process holds the same arrays ``named`` (a collective).

    >>> from det_sdk.distributed import SingleProcess
    >>> same_everywhere(SingleProcess(), {"x": np.zeros(3)})
    True
    """
    mine, every = _digests_everywhere(dist, named)
    return all(theirs == mine for theirs in every)


def _check_same_everywhere(dist: Processes, named: dict[str, Any]) -> None:
    """Refuse arrays that differ between processes: each process keeps its part of *its*
    arrays, so different arrays would give overlapping or missing shards, silently."""
    mine, every = _digests_everywhere(dist, named)
    for where in mine:
        ranks = [r for r, theirs in enumerate(every) if theirs.get(where) != every[0].get(where)]
        if ranks:
            raise UsageError(
                f"wrap_data: {where} differs between the {dist.size} processes (rank "
                f"{ranks[0]}'s is not rank 0's): each process keeps its part of its own "
                "arrays, so the parts would overlap and miss samples. Prepare the same "
                "arrays on every process before wrap_data: load them in the same order, "
                "shuffle or split with a seeded generator (np.random.default_rng(seed), or "
                "np.random after det.keras.init(), which seeds it the same everywhere), "
                "or pass a tf.data.Dataset or Sequence that wrap_data can shard")
