"""The write path of a replay buffer: ``add``, ``extend`` (consumed slots first), ``empty``."""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rbdata.buffers._coordinates import cells_of_rows, to_coordinates
from rbdata.buffers._deferred_write import _DeferredWrites
from rbdata.writers._base import batch_len, slice_batch


class _WritePath(_DeferredWrites):
    """The write half of :class:`~rbdata.ReplayBuffer`: every change of what the buffer holds.

    Writes validate the data (and the sampler's room) before anything is
    written, go into consumed slots first under ``consume_after_n_samples``,
    then at the writer's cursor, and tell the sampler and sample unit what was
    written. Subclasses hook in with :meth:`_validate_extend` and
    :meth:`_after_extend` (prioritized buffers read priorities from the data).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4))
        >>> rb.extend(torch.arange(3)).tolist(), rb.add(torch.tensor(7)), len(rb)
        ([0, 1, 2], 3, 4)
    """

    def add(self, data: Any) -> int | torch.Tensor:
        """Add a single element and return the index where it lives.

        With a storage of ``ndim > 1`` the element is one item along dim 0 and
        the coordinates of its cells come back (``[cells, ndim]``, as from :meth:`extend`).

        Raises:
            KeyError, TypeError, ValueError: if ``data`` does not fit the storage;
                nothing is written then.
        """
        self._init()
        data = self._prepare(data)
        batch = self._storage.item_as_batch(data)
        if batch is not None:
            index = self._extend(batch, None)
            if self._storage.ndim > 1:
                return index
            return int(index[0]) if index.numel() else -1
        with self._sync.cond:
            if len(self._transform):
                data = self._transform.inv(data)
            self._follow_writes()
            free = self._sampler.reusable_slots(1) if self._consume_after_n is not None else None
            if free is not None and free.numel():
                slot = int(self._writer.write_at(free, [data])[0])
            else:
                slot = self._writer.add(data)
            self._note_written(torch.tensor([slot]))
            self._follower.seen = self._writer.write_count
            self._sync.cond.notify_all()
        return slot

    def extend(self, data: Any, *, update_priority: bool | None = None) -> torch.Tensor:
        """Extend the buffer with a batch of elements; return their indices.

        With a storage of ``ndim > 1`` the indices are the coordinates of every
        written cell, ``[n_cells, ndim]`` (written items along dim 0, then the
        cells of each), as torchrl returns them. A list at the root is a stack
        of items; a tuple is a PyTree. Inverse transforms run first; bad data
        raises before anything is written.

        Raises:
            KeyError, TypeError, ValueError: if ``data`` does not fit the storage;
                nothing is written then.
        """
        self._init()
        return self._extend(
            self._storage.as_batch(self._prepare(data), self.dim_extend), update_priority
        )

    def _extend(self, data: Any, update_priority: bool | None) -> torch.Tensor:
        index = self._extend_deferred(data, update_priority)  # shared buffers' ring writes
        if index is not None:
            return index
        with self._sync.cond:
            if len(self._transform):
                data = self._transform.inv(data)
            if _is_empty(data):
                ndim = self._storage.ndim
                return torch.empty((0, ndim) if ndim > 1 else 0, dtype=torch.long)
            self._validate_extend(data, update_priority)
            self._check_sampler_fits(data)
            self._follow_writes()
            index = self._write(data)
            self._note_written(index[index >= 0] if self._writer.drops_items else index)
            self._follower.seen = self._writer.write_count
            if self._storage.ndim == 1:
                self._after_extend(data, index, update_priority)
                self._sync.cond.notify_all()
                return index
            cells = cells_of_rows(index, self._cells_per_item())
            self._after_extend(data, cells, update_priority)
            self._sync.cond.notify_all()
        return to_coordinates(cells, self._storage_shape())

    def _check_sampler_fits(self, data: Any) -> None:
        """ValueError, before anything is written, if the write would pass the sampler's slots.

        A prioritized sampler keeps one priority per stored cell, for the
        cells ``[0, max_capacity)``; a storage may be larger (torchrl lets a
        small sampler sit on the default ``ListStorage(1000)``) as long as the
        writes stay below it. Writes go from the writer's cursor, wrapping at
        the storage's capacity.
        """
        slots = self._sampler.max_capacity
        if slots is None:
            return
        lead, rows = self._storage_rows(data)
        top_row = min(self._writer.cursor + batch_len(data), rows) - 1
        cells = (top_row + 1) * lead
        if cells > slots:
            raise ValueError(
                f"sampler={type(self._sampler).__name__}(max_capacity={slots}) has fewer slots "
                f"than this write needs: it would fill cells up to {cells} of "
                f"{type(self._storage).__name__}(max_size={self._storage.max_size}, "
                f"ndim={self._storage.ndim}), which holds {rows * lead}; pass "
                f"max_capacity={rows * lead}. Nothing was written."
            )

    def _storage_rows(self, data: Any) -> tuple[int, int]:
        """``(cells per item, items)`` of the storage when full (``ndim > 1``: from ``data``)."""
        storage = self._storage
        if storage.ndim == 1:
            return 1, int(storage.max_size)
        if storage.initialized:
            return self._cells_per_item(), self._storage_shape()[0]
        data_shape = getattr(data, "shape", None)
        if data_shape is None:  # a PyTree: the storage learns its cells at the write
            return 1, int(storage.max_size)
        lead = int(math.prod(tuple(data_shape)[1 : storage.ndim]))
        return lead, -(-int(storage.max_size) // lead)

    def _write(self, data: Any) -> torch.Tensor:
        """Write a batch: into consumed slots first (consume-after-n), then at the cursor.

        The consumed slots a batch reuses take its items in ring order from the
        sampler's reuse position (``Sampler.reusable_slots``).
        """
        writer = self._writer
        if self._consume_after_n is None or writer.write_at is None:
            return writer.extend(data)
        n = batch_len(data)
        free = self._sampler.reusable_slots(n)
        if not free.numel():
            return writer.extend(data)
        k = free.numel()
        if k < n:
            capacity = self._storage.max_size_along_dim0
            at_cursor = (torch.arange(n - k) + writer.cursor) % capacity
            if bool(torch.isin(at_cursor, free).any()):  # the cursor would overwrite them
                return writer.extend(data)
            self._storage.validate(data, True)  # both parts or neither
        head = writer.write_at(free, slice_batch(data, slice(0, k)))
        if k == n:
            return head
        return torch.cat([head, writer.extend(slice_batch(data, slice(k, None)))])

    def empty(self, empty_write_count: bool = True) -> None:
        """Empty the buffer and reset the cursor to 0."""
        with self._sync.cond:
            self._init()
            self._prefetcher.drain()
            self._storage.empty()
            self._writer._empty(empty_write_count)
            self._sampler._empty()
            self._sample_unit._empty()
            self._follower.seen = self._writer.write_count
            self._sync.cond.notify_all()


def _is_empty(data: Any) -> bool:
    kind = type(data)
    if (
        kind is TensorDict
        or kind is torch.Tensor
        or isinstance(data, torch.Tensor | TensorDictBase)
    ):
        shape = data.shape
        return bool(shape) and shape[0] == 0
    if isinstance(data, list):
        return len(data) == 0
    return False
