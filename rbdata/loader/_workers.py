"""ReplayDataset in DataLoader worker processes (``num_workers > 0``).

Workers are separate processes: each holds a copy of the buffer's bookkeeping
taken when the DataLoader started it (fork) or pickled for it (spawn), and
reads the items through the storage's memory. That is safe only when

- the storage is memory that other processes read: a LazyMemmapStorage or a
  storage in shared memory (``shared=True``), and
- the sampler keeps no state that must be shared between the workers and the
  main process: a RandomSampler, or a SamplerWithoutReplacement whose pass is
  split between the workers here, without consume-after-n.

Prioritized sampling (priorities updated by the main process) and
consume-after-n (counts shared by everyone) are not; they get a clear error
pointing to ``prefetch``, the thread-based way to overlap sampling with
training. Seeds come from the DataLoader (``worker_info.seed``), so they
differ between workers and repeat with a seeded DataLoader.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch

from rbdata.buffers import ReplayBuffer
from rbdata.buffers.protocol import aligned_info
from rbdata.loader._batch import as_replay_batch
from rbdata.loader._settings import DatasetSettings
from rbdata.samplers import RandomSampler, Sampler, SamplerWithoutReplacement
from rbdata.storages import LazyMemmapStorage, Storage, TensorStorage

_USE_PREFETCH = (
    "use num_workers=0 with ReplayDataset(prefetch=k), which samples on a background thread "
    "of the main process"
)


def check(ds: DatasetSettings) -> ReplayBuffer:
    """Raise a RuntimeError/ValueError unless ``ds`` can run in worker processes."""
    buffer = ds.buffer
    if not isinstance(buffer, ReplayBuffer):
        raise RuntimeError(
            f"num_workers > 0 needs a ReplayBuffer, got {type(buffer).__name__}, which draws "
            f"from two buffers whose sampling state worker processes cannot share; "
            f"{_USE_PREFETCH}."
        )
    sampler = buffer.sampler
    if type(sampler) not in (RandomSampler, SamplerWithoutReplacement):
        raise RuntimeError(
            f"num_workers > 0 needs a RandomSampler or a SamplerWithoutReplacement; this buffer "
            f"uses {type(sampler).__name__}, whose state worker processes cannot share; "
            f"{_USE_PREFETCH}."
        )
    if sampler.consume_after_n is not None:
        raise RuntimeError(
            f"num_workers > 0 cannot count consumption (consume_after_n_samples="
            f"{sampler.consume_after_n}) across worker processes; {_USE_PREFETCH}."
        )
    storage = buffer.storage
    if not _readable_by_workers(storage):
        raise RuntimeError(
            f"num_workers > 0 needs a storage that worker processes can read without copying "
            f"it: a LazyMemmapStorage or a shared-memory storage (shared=True); got "
            f"{type(storage).__name__}; {_USE_PREFETCH}."
        )
    main_only = {
        "prefetch": ds.prefetch != 0,
        "pin_memory": ds.pin_memory,
        "device": ds.device is not None,
        "timeout": ds.timeout is not None,
        "samples_per_insert/rate_limiter": ds.rate_limiter is not None,
    }
    used = [name for name, on in main_only.items() if on]
    if used:
        raise ValueError(
            f"ReplayDataset({', '.join(used)}) acts in the main process and cannot be used with "
            "num_workers > 0; use the DataLoader's prefetch_factor and pin_memory instead, or "
            "num_workers=0."
        )
    return buffer


def _readable_by_workers(storage: Storage) -> bool:
    if isinstance(storage, LazyMemmapStorage):
        return True
    if not (isinstance(storage, TensorStorage) and storage.initialized):
        return False
    return all(storage.get_leaf(key).is_shared() for key in storage.leaf_keys())


def iterate(ds: DatasetSettings, info: Any) -> Iterator[Any]:
    """The batches of worker ``info.id``: its share of the pass, from its own seed."""
    position = ds._worker
    buffer = check(ds)
    n = len(buffer)
    if n < ds.min_size:
        raise RuntimeError(
            f"the buffer holds {n} items, fewer than min_size={ds.min_size}, when the DataLoader "
            "started its workers; workers see the buffer as it was then and cannot wait for a "
            f"collector; fill it first, or {_USE_PREFETCH}."
        )
    if n == 0:
        return iter(())
    batch_size, workers, worker = ds.batch_size, info.num_workers, info.id
    original = buffer.sampler
    total = ds.num_batches
    if isinstance(original, SamplerWithoutReplacement):
        sampler: Sampler = _ShardedPasses(
            worker, workers, info.seed - info.id, original.shuffle, original.drop_last
        )
        if total is None:
            total = n // batch_size if original.drop_last else -(-n // batch_size)
    else:
        sampler = RandomSampler()
    sampler.set_rng(torch.Generator().manual_seed(info.seed))
    # The worker's copy of the buffer draws with its own sampler, under its own lock (a
    # lock held by a parent thread at fork time would stay locked in the child forever).
    reader = buffer.reader(sampler)
    mine = itertools.count() if total is None else range(len(range(worker, total, workers)))
    skip, position.skip, position.yielded = position.skip, 0, 0
    return _batches(ds, reader, mine, skip)


def _batches(ds: DatasetSettings, reader: ReplayBuffer, mine: Any, skip: int) -> Iterator[Any]:
    position = ds._worker
    for i in mine:
        draw = reader.draw(ds.batch_size)
        if i < skip:  # resumed: these batches were yielded before the checkpoint
            continue
        batch = as_replay_batch(reader.gather(draw))
        position.yielded = i + 1
        yield (batch, aligned_info(batch, draw.info)) if ds.return_info else batch


class _ShardedPasses(Sampler):
    """Worker ``shard``'s batches of without-replacement passes shared by ``num_shards`` workers.

    Every worker draws the same permutations (same seed) and the batches of
    the passes are numbered globally; worker ``w`` takes batches
    ``w, w + num_shards, ...``, so together the workers cover each pass once.
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
