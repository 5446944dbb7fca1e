"""``Ranks``: who this process is among the processes of one training, as a launcher
described it. A plain frozen class, not a dataclass (``dataclasses`` imports
``inspect``, which the ``det`` CLI's start-up avoids).

>>> r = Ranks(rank=1, size=4, local_rank=1, local_size=2, cross_rank=0, cross_size=2)
>>> r.is_chief, r
(False, Ranks(launcher='local', rank=1, size=4, local=1/2, cross=0/2))
"""

from __future__ import annotations

from typing import Any

from det_sdk.errors import DetSdkError

__all__ = ["FrozenRanksError", "Ranks"]


class FrozenRanksError(DetSdkError, AttributeError):
    """A field of a :class:`Ranks` was set: they are read once, from the launcher."""


class Ranks:
    """Rank, size, the ranks on this node and among the nodes, and where the chief
    (rank 0) can be reached when the launcher says (``chief_addr``/``chief_port``,
    None otherwise). ``launcher`` names what described them (``"local"``,
    ``"horovodrun"``, ``"torchrun"``, ``"tf_config"``, ``"slurm"``, ``"mpirun"``).
    """

    __slots__ = ("chief_addr", "chief_port", "cross_rank", "cross_size", "launcher",
                 "local_rank", "local_size", "rank", "size")

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    chief_addr: str | None
    chief_port: int | None
    launcher: str

    def __init__(self, *, rank: int, size: int, local_rank: int, local_size: int,
                 cross_rank: int, cross_size: int, chief_addr: str | None = None,
                 chief_port: int | None = None, launcher: str = "local") -> None:
        values = {"rank": rank, "size": size, "local_rank": local_rank,
                  "local_size": local_size, "cross_rank": cross_rank, "cross_size": cross_size,
                  "chief_addr": chief_addr, "chief_port": chief_port, "launcher": launcher}
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenRanksError(f"Ranks are frozen: cannot set {name}")

    @property
    def is_chief(self) -> bool:
        """True on rank 0."""
        return self.rank == 0

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ranks) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        chief = f", chief={self.chief_addr}:{self.chief_port}" if self.chief_addr else ""
        return (f"Ranks(launcher={self.launcher!r}, rank={self.rank}, size={self.size}, "
                f"local={self.local_rank}/{self.local_size}, "
                f"cross={self.cross_rank}/{self.cross_size}{chief})")


def single() -> Ranks:
    """One process: rank 0 of 1."""
    return Ranks(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
