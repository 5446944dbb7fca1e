"""Determined's ``DataLoader`` on det_sdk: the order is det_sdk's, from (seed, epoch) only.

The user builds ``det_sdk.pytorch.DataLoader(dataset, batch_size=per_slot_batch_size,
shuffle=...)`` as in Determined. The Trainer turns it into a ``torch.utils.data.DataLoader``
whose batches come from :class:`ShardedBatches`: global batch ``k`` of an epoch is
``order[k*G:(k+1)*G]`` (``G`` = per-slot batch size x ranks), rank ``r`` takes its ``r``-th
part, and ``order`` is ``numpy.random.default_rng([seed, epoch]).permutation(n)`` when
shuffled: never the global RNG, so a resumed run sees exactly the batches it would have.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import torch

import numpy as np

from det_sdk.errors import DetSdkError

__all__ = ["DataLoader", "ShardedBatches", "TorchData"]

#: Determined's annotation for a batch: a tensor, a sequence of them, or a dict of them
#: (a string form, so that this module needs no torch to import)
TorchData = Union[dict[str, "torch.Tensor"], Sequence["torch.Tensor"], "torch.Tensor"]


class DataLoader:
    """Determined's ``determined.pytorch.DataLoader``: ``torch.utils.data.DataLoader``'s
    arguments, kept until the Trainer knows the ranks.

    ``batch_size`` is the per-slot batch size (``context.get_per_slot_batch_size()``).
    ``sampler``/``batch_sampler`` are refused: det_sdk orders the data itself so that
    resume and N ranks are exact.
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Any = None, pin_memory: bool = False, drop_last: bool = False,
                 **kwargs: Any) -> None:
        if sampler is not None or batch_sampler is not None:
            raise _ArgError("DataLoader: sampler/batch_sampler are not supported: det_sdk "
                            "orders the data from (seed, epoch) so that resume and N ranks "
                            "are exact; use shuffle=True or False")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise _ArgError(f"DataLoader: batch_size must be an int >= 1, got {batch_size!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.kwargs = kwargs

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def get_data_loader(self, *, seed: int = 0, epoch: int = 0, rank: int = 0, size: int = 1,
                        skip: int = 0, train: bool = True) -> Any:
        """The ``torch.utils.data.DataLoader`` of this rank's batches of ``epoch``."""
        import torch.utils.data

        batches = ShardedBatches(len(self.dataset), self.batch_size, rank=rank, size=size,
                                 shuffle=self.shuffle and train, seed=seed, epoch=epoch,
                                 drop_last=self.drop_last, skip=skip, train=train)
        # torch's DataLoader draws its workers' base seed from a generator each time it is
        # iterated: its own one here (from seed, epoch), so the global RNG, which a
        # checkpoint saves, is the same whether or not a resume re-created the iterator
        gen = torch.Generator()
        gen.manual_seed((int(seed) * 1_000_003 + int(epoch) * 2 + (0 if train else 1)) % 2**63)
        return torch.utils.data.DataLoader(
            self.dataset, batch_sampler=batches, num_workers=self.num_workers,
            collate_fn=self.collate_fn, pin_memory=self.pin_memory, generator=gen,
            **self.kwargs)


class _ArgError(DetSdkError, ValueError):
    """A DataLoader argument det_sdk cannot honour."""


class ShardedBatches:
    """This rank's share of each global batch of one epoch, as lists of dataset indices.

    >>> list(ShardedBatches(10, 2, rank=1, size=2))
    [[2, 3], [6, 7], [9]]
    >>> list(ShardedBatches(10, 2, rank=0, size=2, skip=1))
    [[4, 5], [8]]
    """

    def __init__(self, n: int, per_slot: int, *, rank: int = 0, size: int = 1,
                 shuffle: bool = False, seed: int = 0, epoch: int = 0,
                 drop_last: bool = False, skip: int = 0, train: bool = True) -> None:
        self.n, self.per_slot, self.rank, self.size = n, per_slot, rank, size
        self.shuffle, self.seed, self.epoch = shuffle, seed, epoch
        self.drop_last, self.skip, self.train = drop_last, skip, train

    def global_batches(self) -> list[np.ndarray]:
        """Every global batch of the epoch (all ranks' indices)."""
        order = (np.random.default_rng([int(self.seed) % 2**32, int(self.epoch)]).permutation(
            self.n) if self.shuffle else np.arange(self.n))
        g = self.per_slot * self.size
        out = [order[i:i + g] for i in range(0, self.n, g)]
        # training: a last batch too small to give every rank a sample is dropped (and
        # with drop_last, any partial one); validation keeps every sample
        short = bool(out) and len(out[-1]) < g
        if short and (self.drop_last or (self.train and len(out[-1]) < self.size)):
            out.pop()
        return out

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.global_batches()[self.skip:]:
            yield _share(batch, self.rank, self.size).tolist()

    def __len__(self) -> int:
        return max(0, len(self.global_batches()) - self.skip)


def _share(batch: np.ndarray, rank: int, size: int) -> np.ndarray:
    parts: Sequence[np.ndarray] = np.array_split(batch, size)
    return parts[rank]
