"""``determined.pytorch.samplers``: the sampler building blocks Determined 0.38 exports.

det_sdk's own loaders order the data in :mod:`det_sdk.pytorch._data` (a function of seed
and epoch); these are for scripts that build a ``torch.utils.data.DataLoader`` chain
themselves, as Determined's documentation shows: shuffle, then skip, then shard, then
repeat.

>>> batches = [[0, 1], [2, 3], [4, 5], [6, 7], [8]]
>>> list(DistributedBatchSampler(batches, num_workers=2, rank=1))
[[2, 3], [6, 7]]
>>> list(SkipBatchSampler(batches, skip=3))
[[6, 7], [8]]
>>> import itertools
>>> list(itertools.islice(RepeatBatchSampler([[0], [1]]), 5))
[[0], [1], [0], [1], [0]]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch.utils.data

from det_sdk.errors import DetSdkError

__all__ = ["DistributedBatchSampler", "DistributedSampler", "RepeatBatchSampler",
           "RepeatSampler", "ReproducibleShuffleBatchSampler", "ReproducibleShuffleSampler",
           "SkipBatchSampler", "SkipSampler"]


class SamplerError(DetSdkError, ValueError):
    """A sampler's arguments are out of range."""


def _every_nth(items: Iterable[Any], n: int, offset: int) -> Iterator[Any]:
    for i, item in enumerate(items):
        if i % n == offset:
            yield item


def _shard_len(total: int, n: int, rank: int) -> int:
    # every rank gets total // n; the first total % n ranks one more
    return total // n + int(total % n > rank)


def _check_shard(num_workers: int, rank: int) -> None:
    if num_workers < 1:
        raise SamplerError(f"num_workers must be >= 1, got {num_workers}")
    if not 0 <= rank < num_workers:
        raise SamplerError(f"rank must be in [0, num_workers={num_workers}), got {rank}")


class RepeatSampler(torch.utils.data.Sampler):
    """Its sampler's indices, over and over (forever); ``len`` is one pass."""

    def __init__(self, sampler: Any) -> None:
        self._inner = sampler

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self._inner


class RepeatBatchSampler(torch.utils.data.BatchSampler):
    """Its batch sampler's batches, over and over (forever); ``len`` is one pass."""

    def __init__(self, batch_sampler: Any) -> None:  # torch's __init__ wants a sampler
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self.batch_sampler


class DistributedSampler(torch.utils.data.Sampler):
    """Rank ``rank``'s share of another sampler: every ``num_workers``-th item from
    ``rank`` (unlike torch's, it wraps a sampler, shuffles nothing and pads nothing)."""

    def __init__(self, sampler: Any, num_workers: int, rank: int) -> None:
        _check_shard(num_workers, rank)
        self._inner, self._n, self._rank = sampler, num_workers, rank

    def __len__(self) -> int:
        return _shard_len(len(self._inner), self._n, self._rank)

    def __iter__(self) -> Iterator[Any]:
        return _every_nth(self._inner, self._n, self._rank)


class DistributedBatchSampler(torch.utils.data.BatchSampler):
    """Rank ``rank``'s share of another batch sampler's batches: batch ``i`` goes to rank
    ``i % num_workers``."""

    def __init__(self, batch_sampler: Any, num_workers: int, rank: int) -> None:
        _check_shard(num_workers, rank)
        self.batch_sampler, self.num_workers, self.rank = batch_sampler, num_workers, rank

    def __len__(self) -> int:
        return _shard_len(len(self.batch_sampler), self.num_workers, self.rank)

    def __iter__(self) -> Iterator[Any]:
        return _every_nth(self.batch_sampler, self.num_workers, self.rank)


class SkipBatchSampler(torch.utils.data.BatchSampler):
    """Its batch sampler's batches after the first ``skip`` (a resumed epoch); ``len`` is
    the inner one's, as in Determined. Skip before repeating, or every pass skips."""

    def __init__(self, batch_sampler: Any, skip: int) -> None:
        self.batch_sampler, self.skip = batch_sampler, int(skip)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.batch_sampler)
        for _ in zip(range(self.skip), it):
            pass
        yield from it


class SkipSampler(SkipBatchSampler):
    """:class:`SkipBatchSampler` over single indices (exact only when every batch has the
    same size: a resume counts batches, not records)."""


class ReproducibleShuffleSampler(torch.utils.data.Sampler):
    """Its sampler's indices in an order drawn from ``seed``: each pass draws the next
    permutation of the same seeded stream, so two runs with one seed see the same orders."""

    def __init__(self, sampler: Any, seed: int) -> None:
        self._inner = sampler
        self._rng = np.random.RandomState(seed)

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> Iterator[Any]:
        items = list(self._inner)
        return iter([items[i] for i in self._rng.permutation(len(items))])


class ReproducibleShuffleBatchSampler(ReproducibleShuffleSampler):
    """:class:`ReproducibleShuffleSampler` over whole batches (batch contents unchanged)."""
