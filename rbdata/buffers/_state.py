"""A replay buffer's state: ``state_dict``, sampling state, ``dumps``/``loads``, ``stats``."""

from __future__ import annotations

import math
import os
from typing import Any

from torch.utils.hooks import RemovableHandle

from rbdata.buffers import _persistence
from rbdata.buffers._components import _BufferBase
from rbdata.buffers._prefetch import check_prefetch_state
from rbdata.buffers.protocol import StatsSource
from rbdata.storages import Storage, TensorStorage


class _BufferState(_BufferBase):
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

    @property
    def _futures_lock(self) -> Any:
        """The lock of the batches in flight (torchrl's name): checkpoints hold it to settle."""
        return self._prefetcher.lock

    def state_dict(self) -> dict[str, Any]:
        """The buffer's full state (content included) under fixed keys.

        With ``prefetch``, the batches sampled ahead are part of it
        (``"_prefetch_state"``): they were drawn already, and a restored buffer
        hands them out first.
        """
        self._init()
        self._prefetcher.settle()  # the batches in flight take the lock
        with self._sync.lock:
            state = _persistence.buffer_state(self._parts())
            state["_prefetch_state"] = self._prefetcher.state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (validated first; unchanged on error).

        Raises:
            RuntimeError: if the state holds prefetched batches and was saved by
                a buffer with another ``prefetch``.
        """
        self._init()
        prefetched = state_dict.get("_prefetch_state")
        check_prefetch_state(prefetched, self._prefetch)
        self._prefetcher.settle()
        with self._sync.cond:
            _persistence.load_buffer_state(state_dict, self._parts())
            self._feed.skip_to(self._writer.write_count)
            self._prefetcher.restore(() if prefetched is None else prefetched["queue"])
            self._sync.cond.notify_all()

    def _parts(self) -> _persistence.Parts:
        return _persistence.Parts(
            self._storage,
            self._sampler,
            self._writer,
            self._sample_unit,
            self._transform,
            self._generator,
            self._batch_size,
            self._stats,
        )

    def sampling_state(self) -> dict[str, Any]:
        """What decides the next draws: the sampler's and the generator's state."""
        self._init()
        with self._sync.lock:
            return _persistence.sampling_state(self._sampler, self._generator)

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`sampling_state`'s output (missing entries kept; unchanged on error)."""
        self._init()
        with self._sync.lock:
            _persistence.load_sampling_state(state, self._sampler, self._generator)

    def stats(self) -> dict[str, Any]:
        """A cheap, serializable snapshot of the buffer's operational state."""
        if not self._initialized:
            out: dict[str, Any] = {
                "size": 0,
                "write_count": 0,
                "prefetch_queue_size": 0,
                "initialized": False,
            }
            storage = self._args["storage"]
            if isinstance(storage, Storage):
                out.update(capacity=storage.max_size, utilization=0.0)
            return out
        size = len(self)
        capacity = self._storage.max_size
        storage = self._storage
        if isinstance(storage, TensorStorage) and storage.ndim > 1 and storage.initialized:
            capacity = math.prod(storage.shape)  # whole items along dim 0, as torchrl
        return {
            "size": size,
            "write_count": self._writer.write_count,
            "prefetch_queue_size": len(self._prefetcher),
            "initialized": True,
            "capacity": capacity,
            "utilization": size / capacity,
            **self._storage.memory_stats(),
            **self._stats.snapshot(),
        }

    def register_stats_source(self, source: StatsSource) -> RemovableHandle:
        """Merge ``source()``'s counters into :meth:`stats` until the handle is removed."""
        return self._stats.register(source)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save the buffer atomically in the directory ``path``."""
        self._init()
        _persistence._dumps(self, path)

    def loads(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Load a buffer saved with :meth:`dumps` (checked first; unchanged on error).

        ``allow_pickle=True`` lets a list storage's pickled objects be unpickled
        (which runs code from the file: only for dumps you trust).

        Raises:
            CheckpointError: naming the file and the problem, for a missing,
                damaged or mismatched dump.
        """
        self._init()
        _persistence._loads(self, path, allow_pickle)

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def load(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Alias for :meth:`loads`."""
        self.loads(path, allow_pickle=allow_pickle)
