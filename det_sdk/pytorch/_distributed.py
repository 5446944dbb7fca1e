"""Ranks over ``torch.distributed`` (gloo on CPU, nccl on GPUs): det.core without Horovod or TF.

Where the ranks come from, in this order (read by :mod:`det_sdk.ranks`):

- torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``), as ``det_sdk.launch.torch_distributed`` sets them;
- Horovod's (``HOROVOD_RANK``/``SIZE``/``LOCAL_RANK``/...), which is how the master and
  Slurm start ranks (``horovodrun --gloo``): rank 0 picks a free port and publishes
  ``addr:port`` in horovodrun's own rendezvous key-value store (an HTTP server at
  ``HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT``); the others read it there. Horovod itself is
  never imported (it does not build against torch >= 2.1).

Collectives time out after ``DET_TORCH_TIMEOUT`` seconds (default 60): a rank that
dies makes the others fail within a minute instead of gloo's 30-minute default.
"""

from __future__ import annotations

import datetime
import os
import secrets
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import TypeVar

from det_sdk.core._distributed import DistributedContext as CoreDistributedContext
from det_sdk.core._star import bind_address
from det_sdk.env import setting
from det_sdk.errors import DetSdkError
from det_sdk.ranks import horovodrun, torchrun, which

__all__ = ["TorchDistributed", "launched_by_torch_or_horovod"]

T = TypeVar("T")
_SCOPE = "det_sdk_torch"


class DistributedSetupError(DetSdkError, RuntimeError):
    """The ranks could not find each other (rendezvous, missing variables)."""


def launched_by_torch_or_horovod(environ: Mapping[str, str] | None = None) -> bool:
    """True when torchrun's or horovodrun's rank variables describe more than this process."""
    return torchrun.launched(environ) or horovodrun.launched(environ)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _own_address(toward: str, local_only: bool) -> str:
    if local_only:
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # the interface routing there
        s.connect((toward, 9))
        return str(s.getsockname()[0])


def _rendezvous_via_horovod(env: Mapping[str, str], rank: int, local_only: bool,
                            timeout: float) -> tuple[str, int]:
    store = horovodrun.gloo_rendezvous(env)
    if store is None:
        raise DistributedSetupError(
            "det_sdk.pytorch: HOROVOD_RANK is set but HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT are "
            "not: start the ranks with `horovodrun --gloo`, or use torchrun / "
            "`python -m det_sdk.launch.torch_distributed`")
    addr, port = store
    url = f"http://{addr}:{port}/{_SCOPE}/master"
    if rank == 0:
        host = _own_address(addr, local_only)
        value = f"{host}:{_free_port(host if local_only else '')}".encode()
        req = urllib.request.Request(url, data=value, method="PUT")
        urllib.request.urlopen(req, timeout=timeout).close()
        return host, int(value.decode().rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                host, _, p = resp.read().decode().rpartition(":")
                return host, int(p)
        except urllib.error.HTTPError as err:
            if err.code != 404 or time.monotonic() > deadline:
                raise DistributedSetupError(
                    f"det_sdk.pytorch: rank 0's address never appeared at {url}: {err}"
                ) from err
        time.sleep(0.05)


class TorchDistributed(CoreDistributedContext):
    """One of N processes in a ``torch.distributed`` process group.

    Tensors (DDP's gradients) go through the process group; object collectives
    (stop flags, metrics, RNG states) through det.core's TCP star to rank 0, whose
    port and token rank 0 publishes in the group's own key-value store. Keeping Python
    objects out of gloo matters at exit: gloo's worker thread drops the last
    collective's tensors after the caller returns, and when those are Python objects
    that can be during interpreter shutdown, which aborts the process ("terminate
    called without an active exception", about 1 run in 10 on 2 cores).

    Build it with :meth:`from_env` (what ``det_sdk.pytorch.init()`` does)::

        dist = TorchDistributed.from_env()
        with det.core.init(distributed=dist) as core_context: ...
    """

    def __init__(self, *, rank: int, size: int, local_rank: int, local_size: int,
                 cross_rank: int, cross_size: int, master_addr: str, master_port: int,
                 timeout_s: float = 60.0, backend: str | None = None,
                 chief_ip: str | None = None) -> None:
        import torch
        import torch.distributed as tdist

        self.backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self._dist = tdist
        # threads per rank: the node's cores shared by its ranks
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_size)))
        timeout = datetime.timedelta(seconds=timeout_s)
        if not tdist.is_initialized():
            tdist.init_process_group(
                self.backend, init_method=f"tcp://{master_addr}:{master_port}", rank=rank,
                world_size=size, timeout=timeout)
        chief = chief_ip or master_addr
        port, token = 0, ""
        if size > 1:
            # a client of the group's store (rank 0's, or torchrun's agent's), keyed by
            # torchrun's restart count so a restarted group never reads an old address
            store = tdist.TCPStore(master_addr, master_port, is_master=False, timeout=timeout)
            key = f"det_sdk/objects/{torchrun.restart_count()}"
            if rank == 0:
                port, token = _free_port(bind_address(chief)), secrets.token_hex(16)
                store.set(key, f"{port}:{token}")
            else:
                port_s, _, token = store.get(key).decode().partition(":")
                port = int(port_s)
        super().__init__(rank=rank, size=size, local_rank=local_rank, local_size=local_size,
                         cross_rank=cross_rank, cross_size=cross_size, chief_ip=chief,
                         pub_port=port, token=token, timeout_s=timeout_s)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 chief_ip: str | None = None) -> TorchDistributed:
        """The ranks torchrun or horovodrun describe in the environment."""
        env = os.environ if environ is None else environ
        timeout = float(setting("DET_TORCH_TIMEOUT", env) or 60)
        ranks = which(env, among=("torchrun", "horovodrun"))
        if ranks.launcher == "torchrun":
            if not ranks.chief_addr or not ranks.chief_port:
                raise DistributedSetupError(
                    "det_sdk.pytorch: RANK and WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT "
                    "are not (torchrun sets all of them)")
            master_addr, master_port = ranks.chief_addr, ranks.chief_port
        elif ranks.launcher == "horovodrun":
            master_addr, master_port = _rendezvous_via_horovod(
                env, ranks.rank, ranks.cross_size == 1, timeout)
        else:
            raise DistributedSetupError(
                "det_sdk.pytorch: no ranks in the environment (torchrun's RANK/WORLD_SIZE "
                "or horovodrun's HOROVOD_RANK/HOROVOD_SIZE)")
        return cls(rank=ranks.rank, size=ranks.size, local_rank=ranks.local_rank,
                   local_size=ranks.local_size, cross_rank=ranks.cross_rank,
                   cross_size=ranks.cross_size, master_addr=master_addr,
                   master_port=master_port, timeout_s=timeout, chief_ip=chief_ip)

    def any(self, flag: bool) -> bool:
        return any(self.allgather(bool(flag)))

    def barrier(self) -> None:
        self.allgather(None)

    def close(self) -> None:
        """Close the collectives and leave the process group (at the end of
        ``det.core.init()``'s block)."""
        super().close()
        if self._dist.is_initialized():
            self._dist.destroy_process_group()

    def __repr__(self) -> str:
        return f"TorchDistributed(rank={self.rank}, size={self.size}, backend={self.backend!r})"
