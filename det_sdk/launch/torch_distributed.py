"""The PyTorch launcher: start this node's workers with torchrun's variables.

::

    python3 -m det_sdk.launch.torch_distributed --nproc-per-node 2 python3 train.py
    entrypoint: python3 -m det_sdk.launch.torch_distributed -- python3 train.py

- Under ``horovodrun`` (how the master and Slurm start a trial's ranks today) each
  launcher already is one rank: it execs the script unchanged, and
  :class:`det_sdk.pytorch.TorchDistributed` finds the others from Horovod's variables.
- Otherwise it starts ``--nproc-per-node`` copies of the script (default: the
  cluster's slots for this container, ``len(ClusterInfo.slot_ids)`` where the master
  gives them, else 1) with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` (a free port
  on 127.0.0.1), forwards SIGTERM/SIGINT to them, and when one fails stops the others
  and exits with its status. It needs neither Horovod nor torch.

>>> parse_args(["--nproc-per-node", "2", "python3", "train.py", "--lr", "0.1"])
(2, ['python3', 'train.py', '--lr', '0.1'])
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from det_sdk.errors import DetSdkError
from det_sdk.launch._node import node_slots
from det_sdk.launch.ports import unused_port
from det_sdk.ranks.horovodrun import launched as launched_by_horovod

__all__ = ["main", "parse_args", "worker_env"]

_GRACE_S = 10.0


class LaunchArgumentError(DetSdkError, ValueError):
    """Bad launcher arguments."""


def _default_nproc() -> int:
    return node_slots()


def parse_args(argv: Sequence[str]) -> tuple[int, list[str]]:
    """(workers per node, the script's command)."""
    p = argparse.ArgumentParser(prog="python -m det_sdk.launch.torch_distributed",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=None)
    p.add_argument("script", nargs=argparse.REMAINDER)
    ns = p.parse_args(list(argv))
    script = list(ns.script)
    if script and script[0] == "--":
        script = script[1:]
    if not script:
        raise LaunchArgumentError("torch_distributed: give the command to run, e.g. "
                                  "`python -m det_sdk.launch.torch_distributed python3 train.py`")
    n = ns.nproc_per_node if ns.nproc_per_node is not None else _default_nproc()
    if n < 1:
        raise LaunchArgumentError(f"torch_distributed: --nproc-per-node must be >= 1, got {n}")
    return n, script


def worker_env(rank: int, n: int, port: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """Worker ``rank``'s environment (torchrun's variables, one node).

    >>> e = worker_env(1, 2, 29500, {})
    >>> e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"], e["MASTER_PORT"]
    ('1', '2', '1', '29500')
    """
    env = dict(os.environ if base is None else base)
    env.update({"RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS")
                or str(max(1, (os.cpu_count() or 1) // n))})
    return env


def _stop(procs: list[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    deadline = time.monotonic() + _GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        n, script = parse_args(sys.argv[1:] if argv is None else argv)
    except LaunchArgumentError as err:
        print(err, file=sys.stderr)
        return 2
    if launched_by_horovod():  # one rank of horovodrun's: the script finds the others itself
        os.execvp(script[0], script)
    if n == 1:
        return subprocess.call(script)
    port = unused_port()  # torch's store binds it in rank 0, after torch's import
    procs = [subprocess.Popen(script, env=worker_env(r, n, port)) for r in range(n)]

    def forward(signum: int, _frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:  # one worker failed: the others cannot go on (collectives need all)
            _stop(procs)
            return failed[0] if failed[0] > 0 else 128 - failed[0]
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
