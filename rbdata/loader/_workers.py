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

from rbdata.buffers.protocol import ReadableByWorkers, ServableBuffer, aligned_info
from rbdata.loader._batch import as_replay_batch
from rbdata.loader._settings import DatasetSettings
from rbdata.storages import LazyMemmapStorage, Storage, TensorStorage

_USE_PREFETCH = (
    "use num_workers=0 with ReplayDataset(prefetch=k), which samples on a background thread "
    "of the main process"
)


def check(ds: DatasetSettings) -> ReadableByWorkers:
    """Raise a RuntimeError/ValueError unless ``ds`` can run in worker processes."""
    buffer = ds.buffer
    if not isinstance(buffer, ReadableByWorkers):
        raise RuntimeError(
            f"num_workers > 0 needs a buffer whose workers each read it through a reader of "
            f"their own (a ReplayBuffer), got {type(buffer).__name__}, whose sampling state "
            f"worker processes cannot share; {_USE_PREFETCH}."
        )
    sampler = buffer.sampler
    if sampler.for_worker(0, 1, 0) is None:
        if sampler.consume_after_n is not None:
            raise RuntimeError(
                f"num_workers > 0 cannot count consumption (consume_after_n_samples="
                f"{sampler.consume_after_n}) across worker processes; {_USE_PREFETCH}."
            )
        raise RuntimeError(
            f"num_workers > 0 needs a sampler whose state worker processes need not share (a "
            f"RandomSampler or a SamplerWithoutReplacement); this buffer uses "
            f"{type(sampler).__name__}; {_USE_PREFETCH}."
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
    position = ds.worker_position
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
    sampler = original.for_worker(worker, workers, pass_seed=info.seed - info.id)
    if sampler is None:  # check() above refused it
        raise RuntimeError(f"{type(original).__name__} cannot be split between workers.")
    total = ds.num_batches
    if total is None:
        total = original.batches_per_pass(n, batch_size)
    sampler.set_rng(torch.Generator().manual_seed(info.seed))
    # The worker's copy of the buffer draws with its own sampler, under its own lock (a
    # lock held by a parent thread at fork time would stay locked in the child forever).
    reader = buffer.reader(sampler)
    mine = itertools.count() if total is None else range(len(range(worker, total, workers)))
    skip, position.skip, position.yielded = position.skip, 0, 0
    return _batches(ds, reader, mine, skip)


def _batches(ds: DatasetSettings, reader: ServableBuffer, mine: Any, skip: int) -> Iterator[Any]:
    position = ds.worker_position
    for i in mine:
        draw = reader.draw(ds.batch_size)
        if i < skip:  # resumed: these batches were yielded before the checkpoint
            continue
        batch = as_replay_batch(reader.gather(draw))
        position.yielded = i + 1
        yield (batch, aligned_info(batch, draw.info)) if ds.return_info else batch
