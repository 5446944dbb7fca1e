"""The distributed seam: the processes of this training, and how they talk.

:class:`Processes` is what the engine, det.core and the fronts hold: rank, size and
object collectives. Who this process is among how many is read by :mod:`det_sdk.ranks`
(one module per launcher); ``det.keras.init()`` picks one implementation here and
nothing else in the package asks "am I distributed?": code calls the collectives,
which are trivial on one process. (The public name is ``det.core.DistributedContext``,
Determined's, a subclass with the constructors a script uses.)

>>> d = SingleProcess()
>>> d.rank, d.size, d.shard_batch_size(128)
(0, 1, 128)
>>> d.allgather({"n": 3})
[{'n': 3}]
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

from det_sdk.errors import ArgumentTypeError, UsageError
from det_sdk.ranks.horovodrun import launched as launched_by_horovod

__all__ = ["FRONT_BUILDERS", "Processes",
           "SingleProcess", "front_builder", "launched_by_horovod"]

T = TypeVar("T")


class Processes(ABC):
    """Rank, size and object collectives of the processes that train one model."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int

    @property
    def is_chief(self) -> bool:
        """True on the one process (rank 0) that writes checkpoints and reports."""
        return self.rank == 0

    def shard_batch_size(self, global_batch_size: int) -> int:
        """This process's share of a global batch: ``global_batch_size / size``.

        Keeps the effective batch size the same however many processes train.

        >>> SingleProcess().shard_batch_size(64)
        64
        """
        if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int):
            raise ArgumentTypeError(
                f"global_batch_size must be an int, got {type(global_batch_size).__name__}"
            )
        if global_batch_size < 1:
            raise UsageError(f"global_batch_size must be >= 1, got {global_batch_size}")
        if global_batch_size < self.size:
            raise UsageError(
                f"global_batch_size {global_batch_size} is smaller than the number of "
                f"processes ({self.size}): every process needs at least one sample per batch"
            )
        if global_batch_size % self.size:
            raise UsageError(
                f"global_batch_size {global_batch_size} does not divide by the number of "
                f"processes ({self.size}); use a multiple of {self.size}"
            )
        share = global_batch_size // self.size
        self.__dict__.setdefault("_sharded_batches", {})[share] = global_batch_size
        return share

    def global_batch_of(self, share: int) -> int | None:
        """The global batch size a :meth:`shard_batch_size` call split into ``share``
        (None: no call returned it), for code that must see the global batches a
        script batched per process (a preprocessing layer's ``adapt``).

        >>> p = SingleProcess(); _ = p.shard_batch_size(64)
        >>> p.global_batch_of(64), p.global_batch_of(3)
        (64, None)
        """
        return self.__dict__.get("_sharded_batches", {}).get(share)

    @abstractmethod
    def allgather(self, obj: T) -> list[T]:
        """Every process's ``obj``, in rank order, on every process."""

    @abstractmethod
    def broadcast(self, obj: T, root: int = 0) -> T:
        """``root``'s ``obj`` on every process."""

    def barrier(self) -> None:
        """Wait until every process gets here."""
        self.allgather(None)

    # --- Determined's names: the getters and the gather/local variants ----------------------

    def get_rank(self) -> int:
        """This process's rank (Determined's getter)."""
        return self.rank

    def get_size(self) -> int:
        """The number of processes."""
        return self.size

    def get_local_rank(self) -> int:
        """This process's rank on its node."""
        return self.local_rank

    def get_local_size(self) -> int:
        """The number of processes on this node."""
        return self.local_size

    def get_cross_rank(self) -> int:
        """This node's rank among the nodes."""
        return self.cross_rank

    def get_cross_size(self) -> int:
        """The number of nodes."""
        return self.cross_size

    def gather(self, obj: T) -> list[T] | None:
        """Every process's ``obj`` in rank order on the chief; None on the others.

        >>> SingleProcess().gather(5)
        [5]
        """
        everyone = self.allgather(obj)
        return everyone if self.is_chief else None

    def allgather_local(self, obj: T) -> list[T]:
        """The ``obj`` of every process on this node, in local-rank order.

        >>> SingleProcess().allgather_local("a")
        ['a']
        """
        rows = self.allgather((self.cross_rank, self.local_rank, obj))
        mine = sorted((r for r in rows if r[0] == self.cross_rank), key=lambda r: r[1])
        return [o for _, _, o in mine]

    def gather_local(self, obj: T) -> list[T] | None:
        """This node's objects on its local rank 0; None on the others."""
        mine = self.allgather_local(obj)
        return mine if self.local_rank == 0 else None

    def broadcast_local(self, obj: T | None = None) -> T | None:
        """This node's local rank 0's ``obj`` on every process of the node.

        >>> SingleProcess().broadcast_local({"k": 1})
        {'k': 1}
        """
        return self.allgather_local(obj)[0]

    def gather_arrays(self, arr: Any) -> Any:
        """Every process's rows of ``arr`` (numpy, first axis), concatenated in rank order."""
        import numpy as np

        return np.concatenate(self.allgather(arr))

    def any(self, flag: bool) -> bool:
        """True on every process when ``flag`` is true on any (agreeing to stop together)."""
        return any(self.allgather(bool(flag)))

    def average_gradients(self, grads: list[Any], compression: str | None = None,
                          weight: Any = None) -> list[Any]:
        """TF gradients averaged over all processes (None entries stay None).

        Called inside the optimizer's step (a ``tf.function``): every process
        must apply the same optimizers in the same order. ``compression="fp16"`` sends
        dense float gradients as float16 (Horovod's ``Compression.fp16``; nothing to
        send on one process). ``weight``: this process's weight (a scalar tensor, the
        rows of its batch); the result is then the weighted average
        ``sum(weight_i * grads_i) / sum(weight_i)`` (one process: its own gradients).

        >>> SingleProcess().average_gradients([3.0]), SingleProcess().average_gradients(
        ...     [6.0], weight=2.0)
        ([3.0], [6.0])
        """
        return grads

    def broadcast_variables(self, variables: list[Any], root: int = 0) -> None:
        """Set ``tf.Variable``s on every process to ``root``'s values (nothing on one)."""
        return None


class SingleProcess(Processes):
    """One process: every collective is the identity."""

    def __init__(self) -> None:
        self.rank = self.local_rank = self.cross_rank = 0
        self.size = self.local_size = self.cross_size = 1

    def allgather(self, obj: T) -> list[T]:
        return [obj]

    def broadcast(self, obj: T, root: int = 0) -> T:
        return obj

    def gather_arrays(self, arr: Any) -> Any:
        return arr

    def any(self, flag: bool) -> bool:
        return bool(flag)

    def __repr__(self) -> str:
        return "SingleProcess()"


# --- contexts a front builds -----------------------------------------------------------------

#: Determined's core API builds some contexts on its ``DistributedContext`` class
#: (``from_tf_config``, ``from_torch_distributed``), but building them takes a framework:
#: TensorFlow's strategy and the Keras version (``det_sdk.keras``), torch's process group
#: (``det_sdk.collectives.torch``, below both fronts). That code is its front's (or the
#: collectives' the fronts share): det.core names the launch environment
#: and calls what this table names, ``"module:attribute"``, imported on first use (as
#: ``det.keras`` is, ``_LAZY`` in ``det_sdk/__init__.py``). So a Core API script that
#: never imports a front still gets its context, and det.core imports no front (the
#: layers' contracts, ``[tool.importlinter]`` in pyproject.toml).
FRONT_BUILDERS: dict[str, str] = {
    # () -> the context of a horovodrun process: Horovod's TensorFlow binding
    "horovod": "det_sdk.keras._horovod:HorovodProcesses",
    # (workers, index, environ) -> (context, tf.distribute.Strategy)
    "tf_config": "det_sdk.keras._strategy:context_and_strategy",
    # (chief_ip=) -> the context of a torchrun (or horovodrun) process for PyTorch
    "torch_distributed": "det_sdk.collectives.torch:TorchDistributed.from_env",
}


def front_builder(launch: str) -> Callable[..., Any]:
    """The front's function that builds the context of ``launch`` (a ``FRONT_BUILDERS`` key).

    >>> sorted(FRONT_BUILDERS)
    ['horovod', 'tf_config', 'torch_distributed']
    """
    module, _, path = FRONT_BUILDERS[launch].partition(":")
    found: Any = importlib.import_module(module)
    for name in path.split("."):
        found = getattr(found, name)
    return found
