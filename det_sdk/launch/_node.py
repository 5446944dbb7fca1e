"""What a per-node launcher needs to know about its node: how many workers to start.

Determined's launch model runs an ``entrypoint`` once per node; its launcher starts
one worker per slot of the node, ``len(ClusterInfo.slot_ids)``. Off the cluster (and
under ``horovodrun``, where each process already is one worker) that is 1.

>>> node_slots({})
1
>>> node_slots({"DET_ALLOCATION_ID": "a", "DET_MASTER": "m", "DET_SESSION_TOKEN": "t",
...             "DET_TASK_TYPE": "TRIAL", "DET_SLOT_IDS": "[0, 1]"})
2
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["node_slots", "under_horovodrun"]


def node_slots(environ: Mapping[str, str] | None = None) -> int:
    """The number of workers this node's launcher starts (``len(slot_ids)``, else 1)."""
    from det_sdk.info import get_cluster_info

    env = os.environ if environ is None else environ
    info = get_cluster_info(env)
    return max(1, len(info.slot_ids)) if info is not None else 1


def under_horovodrun(script: list[str], n: int,
                     environ: Mapping[str, str] | None = None) -> list[str]:
    """``horovodrun -np n --gloo`` running ``script`` once per slot.

    On the cluster each worker runs under ``det_sdk.launch.catch`` (horovodrun signals
    only the process it starts: the wrapper passes SIGTERM on, and records the
    worker's own failure where the master reads it).

    >>> under_horovodrun(["python3", "t.py"], 2, {})[1:]
    ['-m', 'det_sdk.launch.horovodrun', '-np', '2', '--gloo', 'python3', 't.py']
    """
    from det_sdk.launch.catch import RECORD_DIR_VAR
    from det_sdk.launch.horovodrun import command as horovodrun  # without its 3 s check

    env = os.environ if environ is None else environ
    records = env.get(RECORD_DIR_VAR)
    if records:
        script = [sys.executable, "-m", "det_sdk.launch.catch", "--forward-signals",
                  "--record-dir", records, "--", *script]
    return [*horovodrun(), "-np", str(n), "--gloo", *script]
