"""A replay buffer's state: ``state_dict``, sampling state, ``dumps``/``loads``, ``stats``."""

from __future__ import annotations

import math
from typing import Any

from rbdata.buffers import _persistence
from rbdata.buffers._components import _Components
from rbdata.buffers._prefetch import check_prefetch_state
from rbdata.storages import Storage, TensorStorage


class _BufferState:
    """Saving, restoring and reporting a buffer's state (the format lives in ``_persistence``).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4))
        >>> _ = rb.extend(torch.arange(3))
        >>> copy = ReplayBuffer(storage=LazyTensorStorage(4))
        >>> copy.load_state_dict(rb.state_dict())
        >>> len(copy), copy.stats()["size"]
        (3, 3)
    """

    def __init__(self, components: _Components) -> None:
        self._components = components

    def state_dict(self) -> dict[str, Any]:
        """The buffer's full state (content and prefetched batches included) under fixed keys."""
        c = self._components
        c.init()
        c.prefetcher.settle()  # the batches in flight take the lock
        with c.sync.lock:
            state = _persistence.buffer_state(self._parts())
            state["_prefetch_state"] = c.prefetcher.state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (validated first; unchanged on error)."""
        c = self._components
        c.init()
        prefetched = state_dict.get("_prefetch_state")
        check_prefetch_state(prefetched, c.prefetch)
        c.prefetcher.settle()
        with c.sync.cond:
            _persistence.load_buffer_state(state_dict, self._parts())
            c.feed.skip_to(c.writer.write_count)
            c.prefetcher.restore(() if prefetched is None else prefetched["queue"])
            c.sync.cond.notify_all()

    def _parts(self) -> _persistence.Parts:
        c = self._components
        return _persistence.Parts(
            c.storage,
            c.sampler,
            c.writer,
            c.sample_unit,
            c.transform,
            c.generator,
            c.batch_size,
            c.stats,
        )

    def sampling_state(self) -> dict[str, Any]:
        """What decides the next draws: the sampler's and the generator's state."""
        c = self._components
        c.init()
        with c.sync.lock:
            return _persistence.sampling_state(c.sampler, c.generator)

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`sampling_state`'s output (missing entries kept; unchanged on error)."""
        c = self._components
        c.init()
        with c.sync.lock:
            _persistence.load_sampling_state(state, c.sampler, c.generator)

    def stats(self) -> dict[str, Any]:
        """A cheap, serializable snapshot of the buffer's operational state."""
        c = self._components
        if not c.initialized:
            out: dict[str, Any] = {
                "size": 0,
                "write_count": 0,
                "prefetch_queue_size": 0,
                "initialized": False,
            }
            storage = c.args["storage"]
            if isinstance(storage, Storage):
                out.update(capacity=storage.max_size, utilization=0.0)
            return out
        size = c.sampleable()
        storage = c.storage
        capacity = storage.max_size
        if isinstance(storage, TensorStorage) and storage.ndim > 1 and storage.initialized:
            capacity = math.prod(storage.shape)  # whole items along dim 0, as torchrl
        return {
            "size": size,
            "write_count": c.writer.write_count,
            "prefetch_queue_size": len(c.prefetcher),
            "initialized": True,
            "capacity": capacity,
            "utilization": size / capacity,
            **storage.memory_stats(),
            **c.stats.snapshot(),
        }
