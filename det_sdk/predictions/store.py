"""What a streamed predict writes its parts through: :class:`OutputStore`, the interface
of its two stores, a directory (det_sdk.predictions.files.PartStore) and an object
store's prefix (det_sdk.predictions.buckets.BucketPartStore). The predict loops of both
fronts call these methods and never ask which store they have.

Order of use: the chief :meth:`~OutputStore.begin`\\ s (det_sdk.predictions.streaming's
``open_store``); every process asks :meth:`~OutputStore.complete_parts` which of its
batches need no work and :meth:`~OutputStore.write_part`\\ s the others; the chief's
:meth:`~OutputStore.finish` writes the final manifest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["OutputStore"]


class OutputStore(ABC):
    """One output of a streamed predict (a directory, or a URL's objects)."""

    #: the output structure of the parts written so far (None before the first)
    _structure: dict[str, Any] | None = None

    @property
    @abstractmethod
    def location(self) -> Path | str:
        """Where the output is (for messages, and what ``load_predictions`` reads)."""

    @abstractmethod
    def sync(self) -> None:
        """Make every part written so far durable."""

    # the chief, before any process writes
    @abstractmethod
    def begin(self, fingerprint: Mapping[str, Any], model: Mapping[str, Any]) -> None:
        """Take the output's lock, then write its manifest, or check that the one there is
        this job's (same input fingerprint and model)."""

    @abstractmethod
    def release(self) -> None:
        """Let another run write the output (done by :meth:`finish`, and by
        ``gather_failures`` when the run failed)."""

    @abstractmethod
    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None where there is none yet; a damaged one is refused."""

    @abstractmethod
    def read_sidecar(self, index: int) -> dict[str, Any] | None:
        """Part ``index``'s sidecar when it is whole; None when absent or damaged."""

    @abstractmethod
    def written_parts(self) -> set[int]:
        """The global batches with a sidecar, complete or not."""

    def structure(self) -> dict[str, Any] | None:
        """The output structure the parts written so far have (None before the first;
        damaged sidecars are passed over)."""
        if self._structure is None:
            for i in sorted(self.written_parts()):
                meta = self.read_sidecar(i)
                if meta is not None:
                    self._structure = meta["structure"]
                    break
        return self._structure

    # every process
    @abstractmethod
    def complete_parts(self, indices: Iterable[int], *, verify: bool = True) -> set[int]:
        """Those of ``indices`` whose part is complete; anything else is removed, to be
        written again."""

    @abstractmethod
    def write_part(self, index: int, outputs: Any) -> int:
        """Write global batch ``index``'s predictions (complete or absent); its rows."""

    # the chief, after every process wrote its parts
    @abstractmethod
    def finish(self, parts: int) -> dict[str, Any]:
        """Write the final manifest over parts ``0 .. parts-1`` (all must be complete)."""
