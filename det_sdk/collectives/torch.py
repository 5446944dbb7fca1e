"""Ranks over ``torch.distributed`` (gloo on CPU, nccl on GPUs): det.core without Horovod or TF.

The PyTorch front's process group (``det_sdk.pytorch``), and the Keras front's on
Keras's torch backend: it lives below both (:mod:`det_sdk.collectives`).

Where the ranks come from, in this order (read by :mod:`det_sdk.ranks`):

- torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``), as ``det_sdk.launch.torch_distributed`` sets them;
- Horovod's (``HOROVOD_RANK``/``SIZE``/``LOCAL_RANK``/...), which is how the master and
  Slurm start ranks (``horovodrun --gloo``): rank 0 serves the group's store on a port
  the kernel picks and publishes ``addr:port`` in horovodrun's own rendezvous key-value
  store (an HTTP server at ``HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT``); the others read it
  there. Horovod itself is never imported (it does not build against torch >= 2.1).

The ports det_sdk publishes are bound first (the store's under horovodrun, the chief's
for object collectives): a port found free and bound later was once taken in between by
another trial on the same host, and that trial failed to start. (``MASTER_PORT`` from
``det_sdk.launch.torch_distributed`` is still found free and bound by rank 0: a plain
``init_process_group()`` script must be able to bind it.)

Collectives time out after ``DET_TORCH_TIMEOUT`` seconds (default 60): a rank that
dies makes the others fail within a minute instead of gloo's 30-minute default.
"""

from __future__ import annotations

import datetime
import os
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

from det_sdk.collectives._rendezvous import (
    NO_RANKS,
    DistributedSetupError,
    HorovodKV,
    gpu_refusal,
    own_address,
)
from det_sdk.core._distributed import DistributedContext as CoreDistributedContext
from det_sdk.core._star import Star, bind_address
from det_sdk.engine.orphan import watch_launcher
from det_sdk.env import setting
from det_sdk.ranks import horovodrun, torchrun, which

if TYPE_CHECKING:
    import torch
    from torch.distributed import Store

__all__ = ["DistributedSetupError", "TorchDistributed", "launched_by_torch_or_horovod",
           "rank_device", "use_rank_device"]

T = TypeVar("T")
_SCOPE = "det_sdk_torch"


def rank_device(local_rank: int, local_size: int, gpus: int) -> torch.device:
    """The device a rank trains on, among ``gpus`` visible ones: GPU ``local_rank`` (one
    per process, as Determined gives each slot its own), or the CPU when there are none.

    Fewer GPUs than local ranks is refused: two processes on one GPU fail in NCCL, and
    ``cuda:<local_rank>`` beyond the last one does not exist.

    >>> rank_device(1, 2, gpus=2), rank_device(1, 2, gpus=0)
    (device(type='cuda', index=1), device(type='cpu'))
    """
    import torch

    if gpus == 0:
        return torch.device("cpu")
    if local_rank >= gpus:
        raise gpu_refusal(local_rank, local_size, gpus)
    return torch.device("cuda", local_rank)


def use_rank_device(local_rank: int, local_size: int) -> torch.device:
    """:func:`rank_device` on this machine, made the current CUDA device (NCCL's
    collectives and a bare ``.cuda()`` then use the rank's own GPU)."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = rank_device(local_rank, local_size, gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def launched_by_torch_or_horovod(environ: Mapping[str, str] | None = None) -> bool:
    """True when torchrun's or horovodrun's rank variables describe more than this process."""
    return torchrun.launched(environ) or horovodrun.launched(environ)


def _rendezvous_via_horovod(env: Mapping[str, str], rank: int, size: int, local_only: bool,
                            timeout: float) -> tuple[str, int, Store | None]:
    """``(host, port, store)``: the group's key-value store, which rank 0 serves on a port
    the kernel picked while binding it and then publishes as ``host:port``; the others read
    that and connect (``store`` is their client). A port found free and bound later can be
    taken in between by another trial on the host."""
    rendezvous = horovodrun.gloo_rendezvous(env)
    if rendezvous is None:
        raise DistributedSetupError(
            "det_sdk: HOROVOD_RANK is set but HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT are "
            "not: start the ranks with `horovodrun --gloo`, or use torchrun / "
            "`python -m det_sdk.launch.torch_distributed`")
    addr, port = rendezvous
    kv = HorovodKV(addr, port, scope=_SCOPE, timeout=timeout)
    import torch.distributed as tdist

    if rank == 0:
        host = own_address(addr, local_only)
        # the server listens on every interface whatever ``host`` is; ``host`` is where
        # rank 0's own client connects, so it must be an address (an empty one, once
        # passed here for "every interface", made rank 0 fail to reach its own store on
        # every multi-node start: Slurm's, horovodrun's over hosts)
        server = tdist.TCPStore(host, 0, world_size=size, is_master=True,
                                timeout=datetime.timedelta(seconds=timeout),
                                wait_for_workers=False)
        kv.set("master", f"{host}:{server.port}")
        return host, int(server.port), server
    host, _, p = kv.get("master").rpartition(":")
    return host, int(p), tdist.TCPStore(host, int(p), is_master=False,
                                        timeout=datetime.timedelta(seconds=timeout))


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

    ``store``, when given, is the group's key-value store on every rank alike (rank 0's
    server, the others' clients: how ranks under horovodrun meet); without it the
    ranks meet at ``tcp://master_addr:master_port`` (torchrun's).
    """

    def __init__(self, *, rank: int, size: int, local_rank: int, local_size: int,
                 cross_rank: int, cross_size: int, master_addr: str, master_port: int,
                 timeout_s: float = 60.0, backend: str | None = None,
                 chief_ip: str | None = None, store: Store | None = None) -> None:
        import torch
        import torch.distributed as tdist

        self.backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self._dist = tdist
        # threads per rank: the node's cores shared by its ranks
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_size)))
        timeout = datetime.timedelta(seconds=timeout_s)
        if not tdist.is_initialized():
            # every rank the same way: init_process_group prefixes the keys of a store it
            # makes from init_method and not those of one it is given
            if store is not None:
                tdist.init_process_group(self.backend, store=store, rank=rank,
                                         world_size=size, timeout=timeout)
            else:
                tdist.init_process_group(
                    self.backend, init_method=f"tcp://{master_addr}:{master_port}",
                    rank=rank, world_size=size, timeout=timeout)
        chief = chief_ip or master_addr
        port, token, listener = 0, "", None
        if size > 1:
            # a client of the group's store (rank 0's, or torchrun's agent's), keyed by
            # torchrun's restart count so a restarted group never reads an old address
            client = tdist.TCPStore(master_addr, master_port, is_master=False,
                                    timeout=timeout)
            key = f"det_sdk/objects/{torchrun.restart_count()}"
            if rank == 0:  # bound before published: no other process can take the port
                listener = Star.listen(bind_address(chief), 0)
                port, token = listener.getsockname()[1], secrets.token_hex(16)
                client.set(key, f"{port}:{token}")
            else:
                port_s, _, token = client.get(key).decode().partition(":")
                port = int(port_s)
        super().__init__(rank=rank, size=size, local_rank=local_rank, local_size=local_size,
                         cross_rank=cross_rank, cross_size=cross_size, chief_ip=chief,
                         pub_port=port, port_offset=0, token=token, timeout_s=timeout_s,
                         listener=listener)

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
                    "det_sdk: RANK and WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT "
                    "are not (torchrun sets all of them)")
            master_addr, master_port = ranks.chief_addr, ranks.chief_port
            store = None  # torchrun's agent's, or rank 0's own: init_process_group binds it
            if ranks.size > 1:  # its workers outlive a SIGKILL of its group: they stop
                watch_launcher()
        elif ranks.launcher == "horovodrun":
            master_addr, master_port, store = _rendezvous_via_horovod(
                env, ranks.rank, ranks.size, ranks.cross_size == 1, timeout)
        else:
            raise DistributedSetupError(NO_RANKS)
        return cls(rank=ranks.rank, size=ranks.size, local_rank=ranks.local_rank,
                   local_size=ranks.local_size, cross_rank=ranks.cross_rank,
                   cross_size=ranks.cross_size, master_addr=master_addr,
                   master_port=master_port, timeout_s=timeout, chief_ip=chief_ip,
                   store=store)

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
