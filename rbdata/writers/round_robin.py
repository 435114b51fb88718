"""RoundRobinWriter: items written one after the other, wrapping around at the end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict
from torch.utils._pytree import tree_map

from rbdata._component.compiling import own_frame
from rbdata.writers._base import Writer, batch_len, slice_batch

if TYPE_CHECKING:
    from rbdata.storages import Storage

__all__ = ["RoundRobinWriter", "TensorDictRoundRobinWriter"]


class RoundRobinWriter(Writer):
    """Writes items at the cursor, one after the other, wrapping around at the storage's end.

    Args:
        compilable: accepted as torchrl's argument (see :class:`Writer`).

    Keyword Args:
        track_generations: keep a per-slot generation stamp (see :class:`Writer`).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4),
        ...                   writer=RoundRobinWriter(track_generations=True))
        >>> rb.extend(torch.arange(6)).tolist()
        [0, 1, 2, 3, 0, 1]
        >>> rb.writer.generations_of(torch.arange(4)).tolist()
        [1, 1, 0, 0]
    """

    writes_in_ring_order = True

    def _write_one(self, data: Any) -> int:
        index = self._cursor
        self.storage.set(index, data)
        self._cursor = (index + 1) % self._capacity()
        return index

    def _write_batch(self, data: Any) -> torch.Tensor:
        storage = self.storage
        kind = type(data)
        n = (
            data.shape[0]
            if (kind is TensorDict or kind is torch.Tensor) and data.shape
            else (batch_len(data))
        )
        if n > 1 and storage.ndim > 1 and not storage.initialized:
            # A multi-dim lazy storage learns its item capacity from its first item.
            first = self._write_batch(slice_batch(data, slice(0, 1)))
            return torch.cat([first, self._write_batch(slice_batch(data, slice(1, None)))])
        capacity = self._capacity()
        start = self._cursor
        index = torch.arange(start, start + n)
        if start + n > capacity:
            index %= capacity
        if n == 0:
            return index
        skip = n - capacity if n > capacity else 0  # only the last `capacity` items survive
        if skip:
            data = slice_batch(data, slice(skip, None))
        first_slot = (start + skip) % capacity
        stop = first_slot + n - skip
        if self._compilable:
            # one write at the slots tensor: no slice bound for dynamo to specialize on
            _set_in_own_frame(storage, index[skip:] if skip else index, data)
        # Slice writes (two at the wrap point): fast copies.
        elif stop <= capacity:
            storage.set(slice(first_slot, stop), data)
        else:
            cut = capacity - first_slot
            tail = slice_batch(data, slice(cut, None))
            if storage.reads_own_memory(tail):  # the first write would change it
                tail = tree_map(torch.clone, tail)
            storage.set(slice(first_slot, capacity), slice_batch(data, slice(0, cut)))
            storage.set(slice(0, stop - capacity), tail)
        # read again: the first write to a lazy multi-dim storage set its item capacity
        self._cursor = (start + n) % self._capacity()
        return index

    def __repr__(self) -> str:
        return f"{type(self).__name__}(cursor={self._cursor}, write_count={self._write_count})"


@own_frame
def _set_in_own_frame(storage: Storage, index: torch.Tensor, data: Any) -> None:
    """``storage.set`` that ``torch.compile`` traces as a frame of its own (compilable writers).

    Traced inline, the storage's counters would be guarded in the writer's frame
    too, which then recompiles once more as the storage fills; in a frame of its
    own, they are guarded (and made dynamic) in one place.
    """
    storage.set(index, data)


class TensorDictRoundRobinWriter(RoundRobinWriter):
    """Round-robin writer for TensorDict data (same behaviour as :class:`RoundRobinWriter`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictReplayBuffer, TensorDictRoundRobinWriter
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10),
        ...     writer=TensorDictRoundRobinWriter(track_generations=True), batch_size=4)
        >>> rb.extend(TensorDict({"obs": torch.zeros(10, 3)}, batch_size=[10])).shape
        torch.Size([10])
    """
