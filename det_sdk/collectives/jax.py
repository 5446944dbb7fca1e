"""Ranks over ``jax.distributed`` (gloo on CPU, NCCL on GPUs): det.core with JAX's processes.

The Keras front's process group on Keras's JAX backend: each process joins JAX's
distributed runtime (a coordinator on rank 0, every process its client), after which
``jax.devices()`` lists every process's devices and one ``jax.jit`` computes over arrays
sharded across them (a ``jax.sharding.Mesh``). Object collectives (stop flags, metrics,
RNG states) go through det.core's TCP star to rank 0, as :class:`TorchDistributed`'s do.

Where the ranks come from (read by :mod:`det_sdk.ranks`, as ``TorchDistributed`` reads
them): torchrun's variables, or horovodrun's. How the ranks meet, in order:

1. **The store.** Rank 0 publishes where its collectives listen (host, port, token) in a
   key-value store every rank reaches: under torchrun the ``torch.distributed`` store at
   ``MASTER_ADDR:MASTER_PORT`` (torchrun's agent serves it; where nothing does, as under
   ``det_sdk.launch.torch_distributed``, rank 0 serves it, as ``TorchDistributed`` does);
   under horovodrun its HTTP rendezvous store (``HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT``).
   The others poll for it up to the bound. The star's port is bound before it is
   published: no other process can take it in between.
2. **The star.** Every rank connects to rank 0 within the bound; one that never
   arrives makes rank 0 raise :class:`DistributedSetupError` naming it (and a rank whose
   rank 0 never published raises naming rank 0), instead of JAX's own wait, which ends
   the process (a C++ abort, no Python error) when a peer is missing.
3. **The coordinator.** JAX's coordinator (a gRPC server on rank 0) must bind its port
   itself, so no socket can be handed down: rank 0 picks a free port just before
   starting it (:func:`det_sdk.launch.ports.unused_port`: below the kernel's ephemeral
   range, named to no other det_sdk launcher on the host), holds it bound with
   ``SO_REUSEPORT`` (which gRPC sets too, so its own bind succeeds while another
   process's fails) and hands ``host:port`` to the others over the star, with whatever
   any rank found wrong (a JAX already started, too few GPUs): all start, or all raise
   the same :class:`DistributedSetupError`. The race left is small: another process may
   take the port in the milliseconds between the pick and the hold (then the hold fails
   and raises :class:`DistributedSetupError` naming the port, since JAX itself crashes,
   SIGSEGV, on a port it cannot bind), and while it is held only a process that also
   sets ``SO_REUSEPORT`` as the same user can bind it as well.
4. ``jax.distributed.initialize`` with gloo for CPU collectives (set before, as JAX
   needs it for multi-process CPU arrays; on GPUs JAX uses NCCL itself) and, where GPUs
   are visible, the local rank's own GPU (``local_device_ids=[local_rank]``, one per
   process as Determined gives each slot its own).

Everything is bounded by ``DET_JAX_TIMEOUT`` seconds, else ``DET_COLLECTIVE_TIMEOUT``,
else 60 s: the store's wait, the star's, JAX's ``initialization_timeout`` and its
``shutdown_timeout``. A peer that dies after the start is JAX's to notice: its
coordination service ends the other processes (after its heartbeat timeout, 100 s).

torch is imported only under torchrun (its store's client); TensorFlow, Keras and
Horovod never; JAX only when there are several processes.

>>> JaxDistributed(rank=0, size=1).allgather("only")
['only']
>>> setup_timeout({"DET_JAX_TIMEOUT": "5", "DET_COLLECTIVE_TIMEOUT": "30"})
5.0
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import importlib.util
import json
import math
import os
import re
import secrets
import socket
from collections.abc import Mapping
from typing import Any

from det_sdk.collectives._rendezvous import (
    NO_RANKS,
    DistributedSetupError,
    HorovodKV,
    KeyValueStore,
    gpu_refusal,
    own_address,
)
from det_sdk.core._distributed import DistributedContext as CoreDistributedContext
from det_sdk.core._star import CollectiveError, Star, bind_address
from det_sdk.engine.orphan import watch_launcher
from det_sdk.env import setting
from det_sdk.launch.ports import NoFreePortError, unused_port
from det_sdk.ranks import horovodrun, torchrun, which

__all__ = ["DEFAULT_TIMEOUT_S", "DistributedSetupError", "JaxDistributed", "TorchStoreKV",
           "rank_gpus", "setup_timeout", "visible_gpus"]

#: seconds: the bound on the ranks' meeting when no setting gives one
DEFAULT_TIMEOUT_S = 60.0
_SCOPE = "det_sdk_jax"  # horovodrun's key-value store: this module's keys
_CUDA_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12",
                 "jax_plugins.xla_cuda13")
_WHAT_TO_CHECK = (
    "Check that every rank's process started and got this far (a rank's own log says why "
    "it stopped), that all were started by the same launcher, and that the port is open "
    "between the hosts")


def setup_timeout(environ: Mapping[str, str] | None = None) -> float:
    """The bound, in seconds, on the ranks' meeting: ``DET_JAX_TIMEOUT``, else
    ``DET_COLLECTIVE_TIMEOUT`` (where above 0: its 0, "no bound", does not apply to a
    start, which is always bounded), else :data:`DEFAULT_TIMEOUT_S`.

    >>> setup_timeout({"DET_COLLECTIVE_TIMEOUT": "30"}), setup_timeout({})
    (30.0, 60.0)
    >>> try:
    ...     setup_timeout({"DET_JAX_TIMEOUT": "soon"})
    ... except DistributedSetupError as err:
    ...     print(err)
    det_sdk: DET_JAX_TIMEOUT='soon' is not a number of seconds
    """
    env = os.environ if environ is None else environ
    for name in ("DET_JAX_TIMEOUT", "DET_COLLECTIVE_TIMEOUT"):
        raw = setting(name, env)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            raise DistributedSetupError(
                f"det_sdk: {name}={raw!r} is not a number of seconds") from None
        if value > 0 and math.isfinite(value):
            return value
        if name == "DET_JAX_TIMEOUT":
            raise DistributedSetupError(
                f"det_sdk: DET_JAX_TIMEOUT must be a positive number of seconds (JAX's start "
                f"is always bounded), got {raw!r}")
    return DEFAULT_TIMEOUT_S


def _jax_cuda_installed() -> bool:
    for name in _CUDA_PLUGINS:
        with contextlib.suppress(ImportError, ValueError):
            if importlib.util.find_spec(name) is not None:
                return True
    return False


def visible_gpus(environ: Mapping[str, str] | None = None, dev: str = "/dev") -> int:
    """How many GPUs JAX will show this process, counted without starting JAX (its backend
    must not start before ``jax.distributed.initialize``): 0 where ``JAX_PLATFORMS``
    leaves CUDA out or no CUDA plugin of JAX's is installed; else the entries of
    ``CUDA_VISIBLE_DEVICES`` where it is set, else the machine's ``/dev/nvidiaN``.

    >>> visible_gpus({"CUDA_VISIBLE_DEVICES": ""}), visible_gpus({"JAX_PLATFORMS": "cpu"})
    (0, 0)
    """
    env = os.environ if environ is None else environ
    platforms = env.get("JAX_PLATFORMS", "")
    if platforms and not {"cuda", "gpu"} & {p.strip() for p in platforms.split(",")}:
        return 0
    shown = env.get("CUDA_VISIBLE_DEVICES")
    if shown is not None:
        ids = [part.strip() for part in shown.split(",") if part.strip()]
        count = 0 if not ids or ids[0] == "-1" else len(ids)
    else:
        try:
            count = sum(1 for name in os.listdir(dev) if re.fullmatch(r"nvidia\d+", name))
        except OSError:
            count = 0
    return count if count and _jax_cuda_installed() else 0


def rank_gpus(local_rank: int, local_size: int, gpus: int) -> list[int] | None:
    """The ``local_device_ids`` of a rank among ``gpus`` visible ones: its own GPU,
    ``[local_rank]``, or None on the CPU (no GPU: every CPU device is the process's).
    Fewer GPUs than local ranks is refused, as :func:`det_sdk.collectives.torch.rank_device`
    refuses it.

    >>> rank_gpus(1, 2, gpus=2), rank_gpus(1, 2, gpus=0)
    ([1], None)
    """
    if gpus == 0:
        return None
    if local_rank >= gpus:
        raise gpu_refusal(local_rank, local_size, gpus)
    return [local_rank]


class TorchStoreKV:
    """torchrun's ``torch.distributed`` store at ``MASTER_ADDR:MASTER_PORT`` as a
    key-value store: a client of torchrun's agent's (``serve=False``), or the server
    itself (``serve=True``, rank 0 where no agent serves it). Imports torch (only ever
    under torchrun)::

        store = TorchStoreKV("127.0.0.1", 29500, serve=False, size=2, timeout=60)
        store.set("det_sdk/jax/0/objects", "...")
    """

    def __init__(self, host: str, port: int, *, serve: bool, size: int,
                 timeout: float) -> None:
        import torch.distributed as tdist

        self.where, self.timeout = f"{host}:{port}", timeout
        try:
            self._store = tdist.TCPStore(
                host, port, world_size=size if serve else None, is_master=serve,
                timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False,
                multi_tenant=True)  # a process group on the same store in this process
        except RuntimeError as err:  # DistNetworkError: nobody serves it, or taken
            raise DistributedSetupError(
                f"det_sdk: torchrun's store at {self.where} "
                f"{'cannot be served' if serve else 'cannot be reached'} "
                f"(within {timeout:g} s): {err}. Is MASTER_ADDR/MASTER_PORT right, and "
                "does torchrun (or rank 0) still run?") from err

    def set(self, key: str, value: str) -> None:
        self._store.set(key, value)

    def get(self, key: str) -> str:
        try:
            return bytes(self._store.get(key)).decode()
        except RuntimeError as err:  # DistStoreError: the key never came within the bound
            raise DistributedSetupError(
                f"det_sdk: rank 0 never published its address ({key!r}) in torchrun's store "
                f"at {self.where} within {self.timeout:g} s: rank 0 did not arrive. "
                f"{_WHAT_TO_CHECK} (the bound: DET_JAX_TIMEOUT).") from err


def _coordinator_host(chief: str) -> str:
    """``chief`` as gRPC writes a host: loopback as 127.0.0.1 (``localhost`` may resolve
    to ::1, where a loopback coordinator does not listen), IPv6 in brackets."""
    if bind_address(chief) == "127.0.0.1":
        return "127.0.0.1"
    return f"[{chief}]" if ":" in chief else chief


def _hold_port(loopback: bool, port: int) -> tuple[socket.socket, str]:
    """A socket bound to ``port`` (not listening) with ``SO_REUSEPORT``, and the bind
    address for JAX's coordinator: while held, only sockets that also set
    ``SO_REUSEPORT`` as this user (gRPC's) can bind the port."""
    choices: list[tuple[socket.AddressFamily, str, str]] = (
        [(socket.AF_INET, "127.0.0.1", f"127.0.0.1:{port}")] if loopback else
        [(socket.AF_INET6, "::", f"[::]:{port}"), (socket.AF_INET, "0.0.0.0", f"0.0.0.0:{port}")])
    last: OSError | None = None
    for family, host, bind in choices:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as err:  # no IPv6 on this host: IPv4's every interface
            last = err
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 too
            sock.bind((host, port))
        except OSError as err:
            sock.close()
            last = err
            if err.errno != errno.EADDRINUSE:  # IPv6 off on this host: IPv4's every interface
                continue
            break
        return sock, bind
    raise DistributedSetupError(
        f"det_sdk: JAX's coordinator cannot bind port {port} on "
        f"{'127.0.0.1' if loopback else 'every interface'}: {last} (another process took "
        "it; starting again picks another)")


def _reserve_coordinator(chief: str) -> tuple[str, str, socket.socket]:
    """``(address the others dial, bind address, held socket)`` of JAX's coordinator."""
    loopback = bind_address(chief) == "127.0.0.1"
    try:
        port = unused_port("127.0.0.1" if loopback else "")
    except NoFreePortError as err:
        raise DistributedSetupError(f"det_sdk: no free port for JAX's coordinator: {err}"
                                    ) from err
    hold, bind = _hold_port(loopback, port)
    return f"{_coordinator_host(chief)}:{port}", bind, hold


def _backends_started() -> bool:
    """True where JAX's backend already runs in this process (then it is too late for
    ``jax.distributed.initialize``, which says so itself, but only on that rank)."""
    try:
        from jax._src import xla_bridge  # JAX's own check, not public
    except ImportError:
        return False
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started()) if callable(started) else False


class JaxDistributed(CoreDistributedContext):
    """One of N processes in JAX's distributed runtime (``jax.distributed``).

    Arrays and ``jax.jit`` computations span the processes' devices (gloo between CPUs,
    NCCL between GPUs); object collectives (``allgather``, ``broadcast``) go through
    det.core's TCP star to rank 0. How the ranks meet, and the bound on it: the module's
    docstring. Build it with :meth:`from_env`, first in the script, before any JAX
    computation (JAX's backend must not have started)::

        dist = JaxDistributed.from_env()
        with det.core.init(distributed=dist) as core_context: ...

    ``store`` (required with ``size > 1``) is where rank 0 publishes its star's host,
    port and token under ``key`` and the others read them; ``chief_ip`` is rank 0's
    address as the others reach it (rank 0's only). ``gpus``: how many GPUs this
    process sees (None: :func:`visible_gpus`). One process (``size=1``) needs no
    runtime: nothing is started, and JAX is not even imported.

    >>> issubclass(JaxDistributed, CoreDistributedContext)
    True
    >>> JaxDistributed(rank=0, size=1)
    JaxDistributed(rank=0, size=1, coordinator=None)
    """

    def __init__(self, *, rank: int, size: int, local_rank: int | None = None,
                 local_size: int | None = None, cross_rank: int | None = None,
                 cross_size: int | None = None, chief_ip: str | None = None,
                 store: KeyValueStore | None = None, key: str = "objects",
                 timeout_s: float = DEFAULT_TIMEOUT_S, gpus: int | None = None) -> None:
        self.timeout_s = timeout_s
        self.coordinator: str | None = None  # host:port of JAX's coordinator
        self._owned = False  # True once this context started jax.distributed
        self._store = store  # rank 0's store server lives as long as the context
        if size <= 1:
            super().__init__(rank=rank, size=size, local_rank=local_rank,
                             local_size=local_size, cross_rank=cross_rank,
                             cross_size=cross_size, chief_ip=chief_ip, port_offset=0,
                             token="", timeout_s=timeout_s)
            return
        if store is None:
            raise DistributedSetupError(
                f"det_sdk: JaxDistributed with size={size} needs a store where rank 0 "
                "publishes its address (JaxDistributed.from_env() finds torchrun's or "
                "horovodrun's)")
        if rank == 0 and not chief_ip:
            raise DistributedSetupError(
                "det_sdk: JaxDistributed's rank 0 needs chief_ip, its address as the other "
                "ranks reach it")
        import jax

        lrank = rank if local_rank is None else local_rank
        lsize = size if local_size is None else local_size
        device_ids, problem = self._local_check(jax, rank, size, lrank, lsize, gpus)
        self._join_star(rank=rank, size=size, local_rank=lrank, local_size=lsize,
                        cross_rank=cross_rank, cross_size=cross_size, chief_ip=chief_ip,
                        store=store, key=key, timeout_s=timeout_s)
        self._start_runtime(jax, device_ids, problem)

    @staticmethod
    def _local_check(jax: Any, rank: int, size: int, local_rank: int, local_size: int,
                     gpus: int | None) -> tuple[list[int] | None, str | None]:
        """This rank's GPU, and what keeps it from starting JAX's runtime (or None)."""
        try:
            ids = rank_gpus(local_rank, local_size, visible_gpus() if gpus is None else gpus)
        except DistributedSetupError as err:
            return None, str(err)
        if jax.distributed.is_initialized():
            if (jax.process_index(), jax.process_count()) != (rank, size):
                return ids, (f"jax.distributed was already started here as process "
                             f"{jax.process_index()} of {jax.process_count()}, not {rank} "
                             f"of {size}")
        elif _backends_started():
            return ids, ("JAX's backend already started in this process (a computation, "
                         "jax.devices() or an array came first): build JaxDistributed "
                         "first in the script, before any JAX computation")
        return ids, None

    def _join_star(self, *, rank: int, size: int, local_rank: int, local_size: int,
                   cross_rank: int | None, cross_size: int | None, chief_ip: str | None,
                   store: KeyValueStore, key: str, timeout_s: float) -> None:
        """Publish (rank 0) or read (the others) the star's address in ``store``, then
        connect, every step within ``timeout_s``."""
        listener: socket.socket | None = None
        try:
            if rank == 0:
                assert chief_ip is not None
                chief = chief_ip
                # bound before published: no other process can take the port
                listener = Star.listen(bind_address(chief), 0)
                port, token = int(listener.getsockname()[1]), secrets.token_hex(16)
                store.set(key, json.dumps({"host": chief, "port": port, "token": token}))
            else:
                found = json.loads(store.get(key))
                chief, port, token = str(found["host"]), int(found["port"]), str(found["token"])
            super().__init__(rank=rank, size=size, local_rank=local_rank,
                             local_size=local_size, cross_rank=cross_rank,
                             cross_size=cross_size, chief_ip=chief, pub_port=port,
                             port_offset=0, token=token, timeout_s=timeout_s,
                             listener=listener)
        except BaseException as err:
            if listener is not None:
                listener.close()
            if not isinstance(err, CollectiveError):
                raise
            raise DistributedSetupError(
                f"det_sdk: JAX's {size} processes did not all meet (rank {rank} waited "
                f"{timeout_s:g} s): {str(err).removeprefix('det_sdk: ')}. {_WHAT_TO_CHECK} "
                "(the bound: DET_JAX_TIMEOUT, else DET_COLLECTIVE_TIMEOUT).") from err

    def _start_runtime(self, jax: Any, device_ids: list[int] | None,
                       problem: str | None) -> None:
        """Agree over the star on the coordinator, or on what keeps a rank from it; then
        ``jax.distributed.initialize`` on every rank."""
        started = jax.distributed.is_initialized()
        coordinator, bind, hold = None, None, None
        if self.rank == 0 and problem is None and not started:
            try:
                assert self.chief_ip is not None
                coordinator, bind, hold = _reserve_coordinator(self.chief_ip)
            except DistributedSetupError as err:
                problem = str(err)
        try:
            reports = self.allgather((problem, started, coordinator))
            problems = [f"rank {r}: {p}" for r, (p, _, _) in enumerate(reports) if p]
            if not problems and len({s for _, s, _ in reports}) > 1:
                problems = [f"jax.distributed was already started on rank"
                            f"{'s' if sum(s for _, s, _ in reports) > 1 else ''} "
                            f"{', '.join(str(r) for r, (_, s, _) in enumerate(reports) if s)}"
                            " but not on the others"]
            if problems:
                raise DistributedSetupError(
                    "det_sdk: JAX's distributed runtime cannot start on every rank, so no "
                    "rank starts it:\n  " + "\n  ".join(problems))
            self.coordinator = reports[0][2]
            if started:  # the script started it itself (checked above): it owns it
                return
            assert self.coordinator is not None
            if getattr(jax.config, "jax_cpu_collectives_implementation", None) != "mpi":
                # multi-process CPU arrays need it (recent JAX defaults to it, older to none)
                jax.config.update("jax_cpu_collectives_implementation", "gloo")
            bound = max(1, math.ceil(self.timeout_s))
            kwargs: dict[str, Any] = {
                "coordinator_address": self.coordinator, "num_processes": self.size,
                "process_id": self.rank, "initialization_timeout": bound,
                "shutdown_timeout_seconds": bound,
                # every value is given: no guess from Slurm's or MPI's variables
                "cluster_detection_method": "deactivate"}
            if device_ids is not None:
                kwargs["local_device_ids"] = device_ids
            if bind is not None:
                kwargs["coordinator_bind_address"] = bind
            try:
                jax.distributed.initialize(**kwargs)
            except (RuntimeError, ValueError) as err:
                raise DistributedSetupError(
                    f"det_sdk: jax.distributed.initialize failed on rank {self.rank} "
                    f"(coordinator {self.coordinator}): {err}") from err
            self._owned = True
        except BaseException:
            super().close()
            raise
        finally:
            if hold is not None:
                hold.close()  # gRPC's coordinator holds the port now (or nothing does)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 chief_ip: str | None = None) -> JaxDistributed:
        """The ranks torchrun or horovodrun describe in the environment, in JAX's runtime.

        Raises :class:`DistributedSetupError` where no launcher's ranks are set, or
        where they lack what the ranks meet through (``MASTER_ADDR``/``MASTER_PORT``,
        horovodrun's rendezvous store)::

            dist = JaxDistributed.from_env()   # under torchrun or horovodrun --gloo
        """
        env = os.environ if environ is None else environ
        timeout = setup_timeout(env)
        ranks = which(env, among=("torchrun", "horovodrun"))
        store: KeyValueStore | None = None
        key, chief = "objects", chief_ip
        if ranks.launcher == "torchrun":
            if not ranks.chief_addr or not ranks.chief_port:
                raise DistributedSetupError(
                    "det_sdk: RANK and WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT "
                    "are not (torchrun sets all of them)")
            chief = chief_ip or ranks.chief_addr
            if ranks.size > 1:
                store = TorchStoreKV(
                    ranks.chief_addr, ranks.chief_port, size=ranks.size, timeout=timeout,
                    serve=ranks.rank == 0 and not torchrun.agent_store(env))
                # keyed by torchrun's restart count: a restarted group never reads an old one
                key = f"det_sdk/jax/{torchrun.restart_count(env)}/objects"
                watch_launcher()  # its workers outlive a SIGKILL of its group: they stop
        elif ranks.launcher == "horovodrun":
            rendezvous = horovodrun.gloo_rendezvous(env)
            if rendezvous is None:
                raise DistributedSetupError(
                    "det_sdk: HOROVOD_RANK is set but HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT are "
                    "not: start the ranks with `horovodrun --gloo`, or use torchrun")
            if ranks.size > 1:
                store = HorovodKV(*rendezvous, scope=_SCOPE, timeout=timeout)
                if ranks.rank == 0 and not chief:
                    chief = own_address(rendezvous[0], local_only=ranks.cross_size == 1)
        else:
            raise DistributedSetupError(NO_RANKS)
        return cls(rank=ranks.rank, size=ranks.size, local_rank=ranks.local_rank,
                   local_size=ranks.local_size, cross_rank=ranks.cross_rank,
                   cross_size=ranks.cross_size, chief_ip=chief, store=store, key=key,
                   timeout_s=timeout, gpus=visible_gpus(env) if ranks.size > 1 else 0)

    def any(self, flag: bool) -> bool:
        return any(self.allgather(bool(flag)))

    def barrier(self) -> None:
        self.allgather(None)

    def close(self) -> None:
        """Close the collectives and leave JAX's runtime where this context started it
        (at the end of ``det.core.init()``'s block): JAX's shutdown waits, up to the
        bound, for every process to leave."""
        super().close()
        self._store = None
        if self._owned:
            self._owned = False
            import jax

            if jax.distributed.is_initialized():
                jax.distributed.shutdown()

    def __repr__(self) -> str:
        return (f"JaxDistributed(rank={self.rank}, size={self.size}, "
                f"coordinator={self.coordinator!r})")
