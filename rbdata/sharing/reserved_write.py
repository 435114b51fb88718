"""Writes into a shared buffer that copy their rows outside its lock: reserve, copy, release.

Several processes extending one shared buffer (``share()``, torchrl's
``shared=True``) take its one cross-process lock. Held for the whole write,
it makes them take turns: four writers wrote no faster than one. A ring
write of a plain batch instead holds the lock only to *reserve* its rows
(the cursor, write count, generations and the storage's length move on as
for a write, :func:`reserve`) and copies the rows after releasing it, while
other writers reserve and copy theirs (see :mod:`.in_flight` for what
readers and other lock holders see meanwhile).

The batch is checked before anything moves: a write that fails changes
nothing. Which writes may do this is decided in :mod:`.eligibility`; every
other write (a transform, ``consume_after_n_samples``, a prioritized or
trajectory sampler, a writer that does not write in ring order, a batch
larger than the storage or reading its own rows, more copies in flight
than :data:`~.in_flight.SLOTS`) takes the lock for the whole write.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rbdata.sharing.components import Cursor, Draws, Rows, WriteNotes
from rbdata.sharing.counters import count_written
from rbdata.sharing.eligibility import can_reserve
from rbdata.sharing.faults import any_armed, armed, fault_point
from rbdata.sharing.ring import ring_ranges, ring_slots
from rbdata.sharing.sync import _BufferSync

__all__ = ["extend_reserved", "reserve"]


def reserve(writer: Cursor, storage: Rows, n: int) -> int:
    """Place ``n`` items at the writer's cursor, stamped and counted, without writing them.

    Moves the writer's cursor and write count, the slots' generations and the
    storage's length as the ring write of ``n`` items would (the lock held).

    Returns:
        The first of their slots (they follow it in ring order).

    Raises:
        ValueError: if ``n`` is not in ``[1, capacity]``.
    """
    capacity = storage.max_size_along_dim0
    if not 1 <= n <= capacity:
        raise ValueError(f"n must be in [1, {capacity}] (the capacity), got {n}.")
    cells = writer.counters.cells
    start = cells[0]
    stop = start + n
    cells[0] = stop % capacity
    if writer.tracks_generations:
        stamps = storage.slot_generations
        if stamps is not None:
            slots = ring_slots(start, n, capacity)
            stamps.index_add_(0, slots, torch.ones_like(slots))
    cells[1] += n
    storage_cells = storage.counters.cells
    if stop <= capacity:  # one run (count_written, inlined: on every reserved write)
        storage_cells[1] += 1
        if stop > storage_cells[0]:
            storage_cells[0] = stop
        storage_cells[2] = stop - 1
        return start
    count_written(storage_cells, capacity, capacity - 1)
    count_written(storage_cells, stop - capacity, stop - capacity - 1)
    return start


def extend_reserved(
    sync: _BufferSync,
    parts: Callable[[], tuple[Rows, Cursor, Draws, WriteNotes]],
    data: object,
    validate: Callable[[], None],
) -> torch.Tensor | None:
    """Write the batch ``data`` with its copy outside the lock; None if this write cannot be.

    Args:
        sync: the buffer's locks (shared: with the rows in flight).
        parts: the buffer's storage, writer, sampler and sample unit now (read
            again under the lock: another thread may swap them).
        data: the batch, inverse transforms applied (the caller checks there are none).
        validate: checks the write beyond the rows (a prioritized buffer's priorities).

    The sampler and sample unit keep no state of writes here (they hear of
    this one at this process's next draw, as of other processes' writes).
    """
    in_flight = sync.in_flight
    if in_flight is None:
        return None
    storage, writer, sampler, unit = parts()
    if not can_reserve(writer, sampler, unit):
        return None
    leaves = storage.batch_leaves(data)  # checked here: a bad batch raises, nothing moved
    if leaves is None:
        return None
    validate()
    n = leaves[0].shape[0]
    capacity = storage.max_size_along_dim0
    sync.acquire_to_reserve()
    try:
        if parts()[0] is not storage:  # swapped by another thread meanwhile
            return None
        cursor = writer.counters.cells
        at = cursor[0]
        ranges = ring_ranges(at, n, capacity)
        # the journal: the counters as they were, restored if this process dies reserving
        slot = in_flight.claim(ranges, (at, cursor[1], storage.counters.cells[0]))
        if slot is None:  # no free slot, or those rows still in flight: under the lock
            return None
        start = reserve(writer, storage, n)
        in_flight.reserved(slot)
        sync.cond.notify_all()  # a waiter checks under the lock: after the copy
    finally:
        sync.release_reserved()
    testing = any_armed()  # a fault test: the points below are passed (else skipped)
    if testing:
        fault_point("after-reserve")
    try:
        # the rows up to the ring's end, then the rest (a fault test: two halves,
        # with the "mid-copy" point between them)
        head = ranges[1] - ranges[0] if ranges[3] else n
        if testing and head == n and armed("mid-copy"):
            head = (n + 1) // 2
        storage.write_leaves(start, [t[:head] for t in leaves] if head < n else leaves)
        if testing:
            fault_point("mid-copy")
        if head < n:
            storage.write_leaves((start + head) % capacity, [t[head:] for t in leaves])
        if testing:
            fault_point("before-commit")
    finally:
        in_flight.release(slot)
    return ring_slots(start, n, capacity)
