"""Without-replacement passes shared by the DataLoader's worker processes."""

from __future__ import annotations

from typing import Any

import torch

from rbdata.samplers._base import Sampler
from rbdata.storages import Storage

__all__ = ["WorkerPasses"]


class WorkerPasses(Sampler):
    """Worker ``shard``'s batches of without-replacement passes shared by ``num_shards`` workers.

    Every worker draws the same permutations (same ``seed``) and the batches
    of the passes are numbered globally; worker ``w`` takes batches
    ``w, w + num_shards, ...``, so together the workers cover each pass once.

    Examples:
        >>> class Slots:
        ...     max_size = 6
        ...     def __len__(self):
        ...         return 6
        >>> first = WorkerPasses(0, 2, seed=0, shuffle=False, drop_last=False)
        >>> second = WorkerPasses(1, 2, seed=0, shuffle=False, drop_last=False)
        >>> first.sample(Slots(), 2)[0], second.sample(Slots(), 2)[0]
        (tensor([0, 1]), tensor([2, 3]))
    """

    def __init__(
        self, shard: int, num_shards: int, seed: int, shuffle: bool, drop_last: bool
    ) -> None:
        super().__init__()
        self._shard, self._num_shards = shard, num_shards
        self._shuffle, self._drop_last = shuffle, drop_last
        self._perm_gen = torch.Generator().manual_seed(seed)
        self._perm: torch.Tensor | None = None
        self._chunks = 0
        self._next = 0
        self._global = 0

    def _sample(
        self, storage: Storage, batch_size: int, live: Any
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return this worker's next batch of the shared passes."""
        n = len(storage)
        while True:
            if self._perm is None:
                self._chunks = n // batch_size if self._drop_last else -(-n // batch_size)
                if self._chunks == 0:
                    raise RuntimeError(
                        f"drop_last=True needs at least batch_size={batch_size} items, got {n}."
                    )
                gen = self._perm_gen
                self._perm = torch.randperm(n, generator=gen) if self._shuffle else torch.arange(n)
                self._next = 0
            chunk = self._perm[self._next * batch_size : (self._next + 1) * batch_size]
            mine = self._global % self._num_shards == self._shard
            self._next += 1
            self._global += 1
            if self._next >= self._chunks:
                self._perm = None
            if mine:
                return chunk, {}
