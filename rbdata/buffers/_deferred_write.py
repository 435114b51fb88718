"""Writes into a shared buffer that copy their rows outside its lock.

Several processes extending one shared buffer (``share()``, torchrl's
``shared=True``) take its one cross-process lock. Held for the whole write,
it makes them take turns: four writers wrote no faster than one. A ring
write of a plain batch instead holds the lock only to *reserve* its rows
(the cursor, write count, generations, storage length and sampler move on as
for a write) and copies the rows after releasing it, while other writers
reserve and copy theirs (see :mod:`._in_flight` for what readers and other
lock holders see meanwhile).

The batch is checked before anything moves: a write that fails changes
nothing. Every other write (a transform, ``consume_after_n_samples``, a
prioritized or trajectory sampler, a writer that does not write in ring
order, a batch larger than the storage or reading its own rows, more copies
in flight than :data:`~._in_flight.SLOTS`) takes the lock for the whole
write, as before.
"""

from __future__ import annotations

import torch

from rbdata.buffers._components import _BufferBase
from rbdata.buffers._in_flight import ring_ranges
from rbdata.writers.round_robin import ring_slots


class _DeferredWrites(_BufferBase):
    """The reserved write of a shared buffer (see the module docstring)."""

    def _extend_deferred(self, data: object, update_priority: bool | None) -> torch.Tensor | None:
        """``extend(data)`` with the copy outside the lock; None if this write cannot be.

        The sampler and sample unit keep no state of writes here (they hear of
        this one at this process's next draw, as of other processes' writes).
        """
        in_flight = self._sync.in_flight
        if (
            in_flight is None
            or len(self._transform)
            or self._consume_after_n is not None
            or not self._writer.reserves_rows
            or not self._sampler.draws_from_slots_only
            or self._sample_unit.tracks_writes
        ):
            return None
        storage = self._storage
        leaves = storage.defer_rows(data)  # checked here: a bad batch raises, nothing moved
        if leaves is None:
            return None
        self._validate_extend(data, update_priority)
        n = leaves[0].shape[0]
        capacity = storage.max_size_along_dim0
        sync = self._sync
        sync.acquire_to_reserve()
        try:
            if self._storage is not storage:  # swapped by another thread meanwhile
                return None
            ranges = ring_ranges(self._writer.cursor, n, capacity)
            slot = in_flight.claim(ranges)
            if slot is None:  # no free slot, or those rows still in flight: under the lock
                return None
            start = self._writer.reserve(n)
            storage.mark_written(ranges[1])
            if ranges[3]:
                storage.mark_written(ranges[3])
            sync.cond.notify_all()  # a waiter checks under the lock: after the copy
        finally:
            sync.release_reserved()
        try:
            head = ranges[1] - ranges[0]
            if ranges[3]:
                storage.copy_rows(start, [t[:head] for t in leaves])
                storage.copy_rows(0, [t[head:] for t in leaves])
            else:
                storage.copy_rows(start, leaves)
        finally:
            in_flight.release(slot)
        index = ring_slots(start, n, capacity)
        self._after_extend(data, index, update_priority)
        return index

    def _validate_extend(self, data: object, update_priority: bool | None) -> None:
        """Hook: check ``data`` before anything is written (prioritized buffers: priorities)."""

    def _after_extend(
        self, data: object, index: torch.Tensor, update_priority: bool | None
    ) -> None:
        """Hook: work after a write (prioritized buffers: priorities read from the data)."""
