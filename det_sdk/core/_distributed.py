"""The core API's distributed context: the package's seam, plus the constructors a script uses.

``det_sdk.core.DistributedContext`` is :class:`det_sdk.distributed.DistributedContext`
with two ways in that Determined's core API has:

- :meth:`DistributedContext.from_tf_config` for a script under the TensorFlow
  launcher (``python3 -m det_sdk.launch.tensorflow -- python3 train.py``): a context
  and the ``tf.distribute.Strategy`` that fits the processes and devices;
- :meth:`DistributedContext.from_horovod` for processes started by ``horovodrun``.

Across TensorFlow workers the object collectives (``allgather``, ``broadcast``) go
through a small TCP star around the chief; the tensors of training go through the
strategy. TensorFlow is imported only inside ``from_tf_config``/``from_horovod``.

>>> parse_tf_config('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"index": 1}}')
(['a:1', 'b:2'], 1)
>>> parse_tf_config(None)
([], 0)
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any, TypeVar

from det_sdk import distributed as _base
from det_sdk.errors import DetSdkError

__all__ = [
    "DistributedContext",
    "TFWorkers",
    "UnsupportedStrategyError",
    "parse_tf_config",
]

log = logging.getLogger("det_sdk.core")
T = TypeVar("T")

# Set by det_sdk.launch.tensorflow next to TF_CONFIG: where the chief's collectives
# listen ("host:port") and the token a worker shows when it connects.
COLLECTIVE_ADDR_VAR = "DET_TF_COLLECTIVE_ADDR"
COLLECTIVE_TOKEN_VAR = "DET_TF_COLLECTIVE_TOKEN"
_CONNECT_TIMEOUT = 300.0  # s: workers start at different speeds (importing TF, ~2 s each)

KERAS3_MULTIWORKER_MESSAGE = (
    "det_sdk: {n} TensorFlow worker processes need MultiWorkerMirroredStrategy, which "
    "Keras 3 does not support across processes (broken upstream: keras-team/keras#20585). "
    "This Keras is {version}. Use instead: (a) horovodrun: on the cluster "
    "slots_per_trial: N runs the launcher under it, locally run "
    "horovodrun -np N --gloo python3 -m det_sdk.launch.tensorflow -- python3 train.py "
    "(DeterminedCallback then trains the N processes with det_sdk's own gradient "
    "averaging), (b) one process (MirroredStrategy still uses every local GPU), or "
    "(c) Keras 2: TensorFlow <= 2.15, or tf-keras with TF_USE_LEGACY_KERAS=1."
)


class UnsupportedStrategyError(DetSdkError, RuntimeError):
    """The processes and the installed Keras ask for a strategy that does not work."""


def parse_tf_config(raw: str | None) -> tuple[list[str], int]:
    """``TF_CONFIG`` -> (worker addresses, this process's index); ``([], 0)`` when unset.

    Raises ``ValueError`` naming ``TF_CONFIG`` and the field when it is malformed.
    """
    if not raw:
        return [], 0
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"TF_CONFIG is not valid JSON: {err}") from None
    workers = (cfg.get("cluster") or {}).get("worker") if isinstance(cfg, dict) else None
    if not isinstance(workers, list) or not workers or not all(
            isinstance(w, str) and ":" in w for w in workers):
        raise ValueError("TF_CONFIG: cluster.worker must be a non-empty list of 'host:port'")
    task = cfg.get("task") or {}
    index = task.get("index", 0)
    if task.get("type", "worker") != "worker" or not isinstance(index, int) \
            or not 0 <= index < len(workers):
        raise ValueError(f"TF_CONFIG: task must be a worker with an index in "
                         f"[0, {len(workers)}), got {task!r}")
    return list(workers), index


class DistributedContext(_base.DistributedContext):
    """Rank, size and collectives of the processes of one training (Determined's name).

    Any :class:`det_sdk.distributed.DistributedContext` works with
    :func:`det_sdk.core.init`; this class adds the constructors::

        distributed, strategy = det.core.DistributedContext.from_tf_config()
        with det.core.init(distributed=distributed) as core_context:
            with strategy.scope():
                model = build_model()
    """

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
        workers, index = parse_tf_config(env.get("TF_CONFIG"))
        if not workers and _base.launched_by_horovod(env) and int(env["HOROVOD_SIZE"]) > 1:
            # Each of the N processes would take itself for the only one (N chiefs
            # reporting the same trial): say what is missing instead.
            raise UnsupportedStrategyError(
                f"det_sdk: {env['HOROVOD_SIZE']} processes were started (horovodrun, e.g. "
                "slots_per_trial > 1) but TF_CONFIG is not set: put the TensorFlow launcher in "
                "the entrypoint (python3 -m det_sdk.launch.tensorflow -- python3 train.py), or "
                "use DistributedContext.from_horovod()")
        import tensorflow as tf

        if len(workers) > 1:
            from det_sdk.keras import _compat

            if _compat.KERAS_MAJOR >= 3:
                if _base.launched_by_horovod(env) and int(env["HOROVOD_SIZE"]) == len(workers):
                    return _horovod_workers(workers, index, env), tf.distribute.get_strategy()
                raise UnsupportedStrategyError(KERAS3_MULTIWORKER_MESSAGE.format(
                    n=len(workers), version=_compat.KERAS_VERSION))
            _share_cores(workers, index)
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
            return TFWorkers(workers, index, env), strategy
        if len(tf.config.list_physical_devices("GPU")) > 1:
            return _single(), tf.distribute.MirroredStrategy()
        return _single(), tf.distribute.get_strategy()

    @classmethod
    def from_horovod(cls) -> _base.DistributedContext:
        """The context of a process started by ``horovodrun`` (calls ``hvd.init()``).

        >>> distributed = DistributedContext.from_horovod()  # doctest: +SKIP
        """
        return _base.HorovodProcesses()


# Every det_sdk context is one of these for isinstance (det.keras.init()'s too).
DistributedContext.register(_base.SingleProcess)
DistributedContext.register(_base.HorovodProcesses)


def _single() -> _base.DistributedContext:
    return _base.SingleProcess()


def _horovod_workers(workers: list[str], index: int,
                     env: Mapping[str, str]) -> _base.DistributedContext:
    """Keras 3 under ``horovodrun`` + the launcher: Horovod's processes, not TensorFlow's.

    ``MultiWorkerMirroredStrategy`` cannot train Keras 3 across processes, so the
    processes train as det_sdk's Horovod ones: ``DeterminedCallback`` averages the
    gradients in the model's optimizer, broadcasts rank 0's start and splits every
    batch between the processes. The strategy is TensorFlow's default one, and
    ``TF_CONFIG`` leaves this process's environment, so that a
    ``tf.distribute.MultiWorkerMirroredStrategy()`` the script makes after this is
    one process's (it would otherwise wait for the others' gRPC servers).

    The processes must see the same batches: TensorFlow's global seed (which
    ``model.fit``'s shuffle of arrays and ``tf.data``'s ``shuffle`` draw from) is
    set to one value on every process, unless the script set one already.
    """
    import tensorflow as tf

    if env is os.environ:
        os.environ.pop("TF_CONFIG", None)
    _share_cores(workers, index)
    dist = _base.HorovodProcesses()
    shared = dist.broadcast(int.from_bytes(os.urandom(4), "big") % 2**31
                            if dist.is_chief else None)
    from tensorflow.python.eager import context  # reading the seed, not drawing from it

    if context.global_seed() is None:
        tf.random.set_seed(shared)
    log.info("det_sdk: %d processes under horovodrun on Keras 3: DeterminedCallback trains "
             "them with det_sdk's gradient averaging (no MultiWorkerMirroredStrategy)",
             dist.size)
    return dist


def _share_cores(workers: list[str], index: int) -> None:
    """Workers on one host share its cores (each taking all oversubscribes them: measured
    0.68x of one process's throughput with 2 on 2 cores). Before the first TF op."""
    import tensorflow as tf

    host = workers[index].rsplit(":", 1)[0]
    local = sum(1 for w in workers if w.rsplit(":", 1)[0] == host)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not tf.config.list_physical_devices("GPU") and local > 1:
        share = max(1, (cores or 1) // local)
        tf.config.threading.set_intra_op_parallelism_threads(share)
        tf.config.threading.set_inter_op_parallelism_threads(share)


# --- object collectives over TCP around the chief -------------------------------------------


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("det_sdk: a worker process went away during a collective")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> Any:
    (n,) = struct.unpack("!Q", _recv_exact(sock, 8))
    # Peers are this training's own processes, admitted by the launcher's token.
    return pickle.loads(_recv_exact(sock, n))


class TFWorkers(DistributedContext):
    """One of the worker processes of a ``TF_CONFIG`` cluster.

    Rank is the worker index; the chief (index 0) holds one connection per other
    worker, and an allgather is each sending its object and receiving the list.
    Collectives run on the training thread at points every process reaches (epoch
    ends), like Horovod's.

    >>> TFWorkers(["localhost:1"], 0).size
    1
    """

    def __init__(self, workers: list[str], index: int,
                 environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.rank, self.size = index, len(workers)
        hosts = [w.rsplit(":", 1)[0] for w in workers]
        mine = hosts[index]
        self.local_rank = sum(1 for h in hosts[:index] if h == mine)
        self.local_size = hosts.count(mine)
        unique = list(dict.fromkeys(hosts))
        self.cross_rank, self.cross_size = unique.index(mine), len(unique)
        addr = env.get(COLLECTIVE_ADDR_VAR)
        if not addr:  # TF_CONFIG written by someone else: the port after the chief's
            chief_host, chief_port = workers[0].rsplit(":", 1)
            addr = f"{chief_host}:{int(chief_port) + 1}"
        self._addr = addr
        self._token = env.get(COLLECTIVE_TOKEN_VAR, "")
        self._peers: dict[int, socket.socket] = {}
        self._chief: socket.socket | None = None
        if self.size > 1:
            self._connect()

    def _connect(self) -> None:
        host, port = self._addr.rsplit(":", 1)
        deadline = time.monotonic() + _CONNECT_TIMEOUT
        if self.rank == 0:
            with socket.create_server((host, int(port))) as server:
                server.settimeout(_CONNECT_TIMEOUT)
                while len(self._peers) < self.size - 1:
                    conn, _ = server.accept()
                    conn.settimeout(None)
                    try:
                        rank, token = _recv(conn)
                    except Exception:  # not one of ours
                        conn.close()
                        continue
                    if token != self._token or not 0 < rank < self.size:
                        log.warning("det_sdk: refused a collective connection (bad token)")
                        conn.close()
                        continue
                    self._peers[rank] = conn
            return
        while True:
            try:
                sock = socket.create_connection((host, int(port)), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise ConnectionError(
                        f"det_sdk: worker {self.rank} could not reach the chief's "
                        f"collectives at {self._addr} within {_CONNECT_TIMEOUT:.0f} s") from None
                time.sleep(0.2)
        sock.settimeout(None)
        _send(sock, (self.rank, self._token))
        self._chief = sock

    def allgather(self, obj: T) -> list[T]:
        if self.size == 1:
            return [obj]
        if self.rank == 0:
            parts = [obj] + [_recv(self._peers[r]) for r in range(1, self.size)]
            for r in range(1, self.size):
                _send(self._peers[r], parts)
            return parts
        assert self._chief is not None
        _send(self._chief, obj)
        return _recv(self._chief)

    def broadcast(self, obj: T, root: int = 0) -> T:
        return self.allgather(obj if self.rank == root else None)[root]

    def close(self) -> None:
        """Close the connections (at the end of the script)."""
        for s in [*self._peers.values(), *([self._chief] if self._chief else [])]:
            s.close()
        self._peers.clear()
        self._chief = None

    def __repr__(self) -> str:
        return f"TFWorkers(rank={self.rank}, size={self.size})"
