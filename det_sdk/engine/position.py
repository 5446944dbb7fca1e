"""Where training is, counted the same way by every front.

A position is ``batch`` batches into epoch ``epoch``, ``steps_completed`` batches since
the run began (those before a resume included). Checkpoints record it in their metadata;
:func:`position_of` reads it back.

>>> p = Position(epoch=1, batch=3, steps_completed=13)
>>> position_of({**p.as_dict(), "uuid": "..."}) == p
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Position", "position_of"]


@dataclass(frozen=True)
class Position:
    """Where training is: ``batch`` batches of epoch ``epoch`` are done."""

    epoch: int
    batch: int
    steps_completed: int

    def as_dict(self) -> dict[str, int]:
        """The position as a checkpoint's metadata records it.

        >>> Position(0, 2, 2).as_dict()
        {'epoch': 0, 'batch': 2, 'steps_completed': 2}
        """
        return asdict(self)


def position_of(meta: Mapping[str, Any]) -> Position:
    """Where a checkpoint was taken, from its metadata."""
    return Position(**{k: int(meta[k]) for k in ("epoch", "batch", "steps_completed")})
