"""The core API's distributed context: the package's seam, plus the constructors a script uses.

``det_sdk.core.DistributedContext`` is :class:`det_sdk.distributed.Processes` (rank,
size, collectives) with the ways in that Determined's core API has:

- its constructor, ``DistributedContext(rank=, size=, ..., chief_ip=)``, for ranks a
  launcher or the script knows: object collectives over TCP to the chief
  (:mod:`det_sdk.core._star`), with no Horovod, torch or TensorFlow in the process;

- :meth:`DistributedContext.from_tf_config` for a script under the TensorFlow
  launcher (``python3 -m det_sdk.launch.tensorflow -- python3 train.py``): a context
  and the ``tf.distribute.Strategy`` that fits the processes and devices;
- :meth:`DistributedContext.from_horovod` for processes started by ``horovodrun``.

Across TensorFlow workers the object collectives (``allgather``, ``broadcast``) go
through the same TCP star around the chief; the tensors of training go through the
strategy. TensorFlow is imported only inside ``from_tf_config``/``from_horovod``, and
torch inside ``from_torch_distributed``: what needs a framework is its front's
(``det_sdk.keras._strategy``) or the shared collectives' (``det_sdk.collectives.torch``),
which these call through
``det_sdk.distributed.front_builder``; this module imports no front. The ranks the
launchers describe are read by :mod:`det_sdk.ranks` (``TF_CONFIG``:
:mod:`det_sdk.ranks.tf_config`).

>>> parse_tf_config('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"index": 1}}')
(['a:1', 'b:2'], 1)
>>> parse_tf_config(None)
([], 0)
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any, TypeVar

from det_sdk import distributed as _base
from det_sdk.env import collective_token
from det_sdk.env import port_offset as task_port_offset
from det_sdk.errors import DetSdkError
from det_sdk.ranks import horovodrun, tf_config
from det_sdk.ranks.tf_config import parse_tf_config

__all__ = [
    "DistributedConfigError",
    "DistributedContext",
    "TFWorkers",
    "UnsupportedStrategyError",
    "parse_tf_config",
]

T = TypeVar("T")

_CONNECT_TIMEOUT = 300.0  # s: workers start at different speeds (importing TF, ~2 s each)
DEFAULT_PORT = 12360  # Determined's pub_port default
TOKEN_VAR = "DET_COLLECTIVE_TOKEN"  # the token ranks show the chief (launchers set it)


class DistributedConfigError(DetSdkError, ValueError):
    """A DistributedContext was given ranks or addresses that cannot work."""


class UnsupportedStrategyError(DetSdkError, RuntimeError):
    """The processes and the installed Keras ask for a strategy that does not work."""


class DistributedContext(_base.Processes):
    """Rank, size and collectives of the processes of one training (Determined's name).

    Any :class:`det_sdk.distributed.Processes` works with
    :func:`det_sdk.core.init`; this class adds the constructors::

        distributed, strategy = det.core.DistributedContext.from_tf_config()
        with det.core.init(distributed=distributed) as core_context:
            with strategy.scope():
                model = build_model()
    """

    def __init__(self, *, rank: int, size: int, local_rank: int | None = None,
                 local_size: int | None = None, cross_rank: int | None = None,
                 cross_size: int | None = None, chief_ip: str | None = None,
                 pub_port: int = DEFAULT_PORT, pull_port: int | None = None,
                 port_offset: int | None = None, force_tcp: bool = False, token: str | None = None,
                 timeout_s: float = _CONNECT_TIMEOUT,
                 listener: socket.socket | None = None) -> None:
        """Ranks you know, and object collectives over TCP to the chief at ``chief_ip``.

        Determined's constructor: a launcher (or your own code) knows each process's
        ranks and the chief's address; nothing else is needed in the process (no
        Horovod, torch or TensorFlow). The chief listens on ``pub_port + port_offset``
        (``port_offset`` defaults to the cluster's ``DET_UNIQUE_PORT_OFFSET``, so two
        tasks on one host differ) and every other rank connects there within
        ``timeout_s``. Each must show the same ``token`` (default:
        ``DET_COLLECTIVE_TOKEN`` from the environment, which det_sdk's launchers set;
        empty admits any det_sdk peer that reaches the port, so keep that port inside
        the cluster's network). ``pull_port`` and ``force_tcp`` are accepted for
        Determined's signature: one port carries both directions here. Local and cross
        ranks default to one node.

        Args:
            rank: this process's rank in ``[0, size)``.
            size: the number of processes.
            chief_ip: the chief's address, required when ``size > 1``.
            listener: rank 0 only: a socket already listening (``Star.listen(bind, 0)``)
                whose port the caller published to the other ranks itself; ``pub_port``
                and ``port_offset`` are then unused.

        Example::

            distributed = det.core.DistributedContext(
                rank=int(os.environ["RANK"]), size=int(os.environ["WORLD_SIZE"]),
                local_rank=int(os.environ["LOCAL_RANK"]), local_size=2,
                cross_rank=0, cross_size=1, chief_ip="10.0.0.1")
            with det.core.init(distributed=distributed) as core_context: ...

        >>> DistributedContext(rank=0, size=1).allgather("only")
        ['only']
        """
        del pull_port, force_tcp
        for name, value in (("rank", rank), ("size", size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise DistributedConfigError(f"DistributedContext: {name} must be an int, "
                                             f"got {value!r}")
        if size < 1 or not 0 <= rank < size:
            raise DistributedConfigError(f"DistributedContext: rank must be in [0, size), got "
                                         f"rank={rank} size={size}")
        if listener is not None and rank != 0:
            raise DistributedConfigError(f"DistributedContext: listener is rank 0's (the "
                                         f"chief's), got it with rank={rank}")
        if size > 1 and not chief_ip:
            raise DistributedConfigError(
                f"DistributedContext: chief_ip is required with size={size} (the address "
                "where rank 0 listens, e.g. det.get_cluster_info().container_addrs[0])")
        self.rank, self.size = rank, size
        self.local_rank = rank if local_rank is None else local_rank
        self.local_size = size if local_size is None else local_size
        self.cross_rank = 0 if cross_rank is None else cross_rank
        self.cross_size = 1 if cross_size is None else cross_size
        self.chief_ip = chief_ip
        if port_offset is None:  # the cluster's per-task offset: tasks on one host differ
            port_offset = task_port_offset()
        port = pub_port + port_offset
        secret = collective_token() if token is None else token
        from det_sdk.core._star import Star, bind_address

        if rank == 0:
            self._star = Star.chief(bind_address(chief_ip), port, size=size, token=secret,
                                    timeout_s=timeout_s, server=listener)
        else:
            assert chief_ip is not None
            self._star = Star.worker(chief_ip, port, rank=rank, size=size, token=secret,
                                     timeout_s=timeout_s)

    def allgather(self, obj: T) -> list[T]:
        return self._star.allgather(obj)

    def broadcast(self, obj: T, root: int = 0) -> T:
        if root == 0:
            return self._star.broadcast(obj)
        return self._star.allgather(obj if self.rank == root else None)[root]

    def close(self) -> None:
        """Close the connections (at the end of ``det.core.init()``'s block)."""
        self._star.close()

    def __repr__(self) -> str:
        return f"DistributedContext(rank={self.rank}, size={self.size})"

    @classmethod
    def from_tf_config(cls, environ: Mapping[str, str] | None = None) -> tuple[Any, Any]:
        """A distributed context and a ``tf.distribute.Strategy`` for this process.

        - ``TF_CONFIG`` with several workers (the TensorFlow launcher on several
          processes): ``MultiWorkerMirroredStrategy`` and a context over those workers.
          On Keras 3, which cannot train under it (keras-team/keras#20585): under
          ``horovodrun`` (``slots_per_trial: N`` on the cluster) a Horovod context
          and the default strategy (``DeterminedCallback`` then averages, broadcasts
          and splits batches itself); other processes (``--processes N``) raise
          :class:`UnsupportedStrategyError` saying what to use instead.
        - One process with several GPUs: ``MirroredStrategy``.
        - Otherwise: TensorFlow's default strategy.

        Call it first in the script: TensorFlow wants its strategy before any other op.

        >>> distributed, strategy = DistributedContext.from_tf_config()  # doctest: +SKIP
        """
        env = os.environ if environ is None else environ
        workers, index = parse_tf_config(env.get(tf_config.TF_CONFIG_VAR))
        hvd = horovodrun.read(env)
        if not workers and hvd is not None and hvd.size > 1:
            # Each of the N processes would take itself for the only one (N chiefs
            # reporting the same trial): say what is missing instead.
            raise UnsupportedStrategyError(
                f"det_sdk: {hvd.size} processes were started (horovodrun, e.g. "
                "slots_per_trial > 1) but TF_CONFIG is not set: put the TensorFlow launcher in "
                "the entrypoint (python3 -m det_sdk.launch.tensorflow -- python3 train.py), or "
                "use DistributedContext.from_horovod()")
        # the strategy, and Keras's version, are the Keras front's (det_sdk.keras._strategy)
        return _base.front_builder("tf_config")(workers, index, env)

    @classmethod
    def from_horovod(cls, hvd: Any = None, chief_ip: str | None = None
                     ) -> _base.Processes:
        """The context of a process started by ``horovodrun`` (calls ``hvd.init()``).

        ``hvd`` and ``chief_ip`` are accepted for Determined's signature; Horovod's
        TensorFlow binding carries the collectives (it imports TensorFlow)::

            distributed = det.core.DistributedContext.from_horovod(hvd)
        """
        del hvd, chief_ip
        built: _base.Processes = _base.front_builder("horovod")()  # the Keras front's
        return built

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> _base.Processes:
        """The context of a process started by ``torchrun`` (or horovodrun) for PyTorch.

        Joins (or reuses) the ``torch.distributed`` process group that torchrun's
        variables describe; object collectives go over TCP to rank 0 at
        ``MASTER_ADDR`` (``chief_ip`` overrides it)::

            distributed = det.core.DistributedContext.from_torch_distributed()
        """
        # the process group is det_sdk.collectives.torch's (shared by the fronts)
        return _base.front_builder("torch_distributed")(chief_ip=chief_ip)


# Every det_sdk context is one of these for isinstance (det.keras.init()'s too).
DistributedContext.register(_base.SingleProcess)  # HorovodProcesses: det_sdk.keras._horovod


# --- a TF_CONFIG cluster's workers -----------------------------------------------------------


def inherited_listener(workers: list[str], index: int,
                       environ: Mapping[str, str] | None = None) -> socket.socket | None:
    """The chief's socket for its collectives that ``det_sdk.launch.tensorflow`` bound
    and left open through exec (``DET_TF_COLLECTIVE_FD``): for worker 0 of several, if
    that descriptor is here and listens on the collectives' port; else None (the chief
    binds the port itself). Taken once: the variable leaves ``os.environ``, as the
    script's own subprocesses do not get the socket.

    >>> inherited_listener(["h:1", "h:2"], 1, {"DET_TF_COLLECTIVE_FD": "0"}) is None
    True
    """
    env = os.environ if environ is None else environ
    raw = env.get(tf_config.COLLECTIVE_FD_VAR)
    if env is os.environ:
        os.environ.pop(tf_config.COLLECTIVE_FD_VAR, None)
    if not raw or index != 0 or len(workers) < 2:
        return None
    port = tf_config.of_workers(workers, index, env).chief_port
    try:
        sock = socket.socket(fileno=int(raw))
    except (ValueError, OSError):  # not a number, or not a socket in this process
        return None
    try:
        ours = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)) \
            and sock.getsockname()[1] == port
    except OSError:
        ours = False
    if not ours:
        sock.detach()  # another descriptor of this process's: leave it open
        return None
    sock.set_inheritable(False)
    return sock


class TFWorkers(DistributedContext):
    """One of the worker processes of a ``TF_CONFIG`` cluster.

    Rank is the worker index; the object collectives go through the chief (index 0) as
    in :class:`DistributedContext`, on the port ``det_sdk.launch.tensorflow`` chose and
    with its token. Collectives run on the training thread at points every process
    reaches (epoch ends), like Horovod's.

    >>> TFWorkers(["localhost:1"], 0).size
    1
    """

    def __init__(self, workers: list[str], index: int,
                 environ: Mapping[str, str] | None = None) -> None:
        ranks = tf_config.of_workers(workers, index, environ)
        assert ranks.chief_addr is not None and ranks.chief_port is not None
        listener = inherited_listener(workers, index, environ)
        super().__init__(
            rank=ranks.rank, size=ranks.size, local_rank=ranks.local_rank,
            local_size=ranks.local_size, cross_rank=ranks.cross_rank,
            cross_size=ranks.cross_size, chief_ip=ranks.chief_addr, pub_port=ranks.chief_port,
            # the port is the one named (the launcher's, or the chief worker's + 1): no
            # task offset on top, or the workers would knock where the chief's inherited
            # socket does not listen
            port_offset=0, token=tf_config.collective_token(environ),
            timeout_s=_CONNECT_TIMEOUT, listener=listener)

    def __repr__(self) -> str:
        return f"TFWorkers(rank={self.rank}, size={self.size})"
