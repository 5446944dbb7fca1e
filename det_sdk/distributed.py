"""The distributed seam: who am I among the processes of this training, and how we talk.

``det.keras.init()`` picks one implementation and nothing else in the package asks
"am I distributed?": code calls the collectives, which are trivial on one process.

>>> d = SingleProcess()
>>> d.rank, d.size, d.shard_batch_size(128)
(0, 1, 128)
>>> d.allgather({"n": 3})
[{'n': 3}]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TypeVar

__all__ = ["DistributedContext", "SingleProcess"]

T = TypeVar("T")


class DistributedContext(ABC):
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
            raise TypeError(
                f"global_batch_size must be an int, got {type(global_batch_size).__name__}"
            )
        if global_batch_size < 1:
            raise ValueError(f"global_batch_size must be >= 1, got {global_batch_size}")
        if global_batch_size < self.size:
            raise ValueError(
                f"global_batch_size {global_batch_size} is smaller than the number of "
                f"processes ({self.size}): every process needs at least one sample per batch"
            )
        if global_batch_size % self.size:
            raise ValueError(
                f"global_batch_size {global_batch_size} does not divide by the number of "
                f"processes ({self.size}); use a multiple of {self.size}"
            )
        return global_batch_size // self.size

    @abstractmethod
    def allgather(self, obj: T) -> list[T]:
        """Every process's ``obj``, in rank order, on every process."""

    @abstractmethod
    def broadcast(self, obj: T, root: int = 0) -> T:
        """``root``'s ``obj`` on every process."""

    def barrier(self) -> None:
        """Wait until every process gets here."""
        self.allgather(None)


class SingleProcess(DistributedContext):
    """One process: every collective is the identity."""

    def __init__(self) -> None:
        self.rank = self.local_rank = self.cross_rank = 0
        self.size = self.local_size = self.cross_size = 1

    def allgather(self, obj: T) -> list[T]:
        return [obj]

    def broadcast(self, obj: T, root: int = 0) -> T:
        return obj

    def __repr__(self) -> str:
        return "SingleProcess()"


