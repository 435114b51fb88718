"""Dropping the rows a dead writer reserved: they never become visible, the ring goes on.

A writer that dies between reserving rows and committing them (killed
mid-copy, or before its copy began) leaves rows that hold zeros, torn data or
the ring's previous rows, although the cursor, the write count and the
length moved past them. The next process to take the lock finds its slot in
the in-flight table and calls :func:`reclaim` (the lock held, every live copy
done):

1. the rows reserved after the dead ones (committed, or written under the
   lock since) move down over them, in ring order;
2. the cursor and the write count go back by the dead rows' count, and a
   storage not yet full loses that much length: the next write lands right
   after the last committed row;
3. the slots freed at the end (``[cursor, cursor + k)``) are filled with
   copies of the rows just before them, so that a batch drawn before the
   reclaim and read after it gets whole rows (a wrapped ring holds those
   duplicates until the next writes overwrite them);
4. every slot whose content changed gets a new generation, so priority
   updates and ``update_if_present`` of handles taken before skip them.

A writer that died *holding the lock* in the middle of a write it makes
under it (a prioritized, slice, transform or consume-after-n write,
journaled by :meth:`~.in_flight.InFlightRows.overwriting`) left no reservation
after it: the counters go back to its journal, and the rows it was
overwriting that were visible before it (a wrapped ring's oldest rows, or
consumed slots) hold copies of the whole rows just before them (in ring
order), with new generations; rows past the length stay invisible. The
dead write's rows are never seen, torn or whole.

Examples:
    >>> import torch
    >>> from rbdata import LazyTensorStorage, RoundRobinWriter
    >>> storage, writer = LazyTensorStorage(8), RoundRobinWriter()
    >>> writer.register_storage(storage)
    >>> _ = writer.extend(torch.arange(6))
    >>> reclaim(storage, writer, (2, 4, 0, 0))  # rows 2 and 3 were a dead writer's
    >>> len(storage), writer.cursor, writer.write_count, storage.get(torch.arange(4)).tolist()
    (4, 4, 4, [0, 1, 4, 5])
"""

from __future__ import annotations

import logging

import torch

from rbdata.sharing.components import Cursor, Rows
from rbdata.sharing.in_flight import Journal, Ranges

__all__ = ["reclaim"]

_log = logging.getLogger(__name__)


def reclaim(
    storage: Rows,
    writer: Cursor,
    ranges: Ranges,
    journal: Journal | None = None,
    locked: bool = False,
) -> None:
    """Drop the rows ``ranges`` reserved by a dead writer (see the module docstring).

    With a ``journal`` (the writer died reserving, holding the lock: no other
    change came after) the counters simply go back to it; ``locked`` (with a
    journal): it died overwriting ``ranges`` under the lock, whose visible
    rows are mended too.
    """
    if locked and journal is not None:
        _undo_overwrite(storage, writer, ranges, journal)
        return
    if journal is not None:
        cells = writer.counters.cells
        cells[0], cells[1] = journal[0], journal[1]
        length = storage.counters.cells
        length[0] = journal[2]
        length[1] += 1
        return
    capacity = storage.max_size_along_dim0
    a, b, c, d = ranges
    k = (b - a) + (d - c)
    if not k:
        return
    cells = writer.counters.cells
    cursor = cells[0]
    after = (cursor - (a + k)) % capacity  # rows reserved after the dead ones
    if after:
        _move(storage, _ring(a + k, after, capacity), a)
    cursor = (cursor - k) % capacity
    cells[0] = cursor
    cells[1] = max(0, cells[1] - k)
    length = storage.counters.cells
    full = length[0] >= capacity
    if not full:
        length[0] = max(0, length[0] - k)
    valid = capacity - k if full else length[0]
    if valid:
        r = min(k, valid)
        source = _ring(cursor - r, r, capacity).repeat(-(-k // r))[:k]
        _move(storage, source, cursor)
    length[1] += 1  # the content changed (the mutation revision)
    stamps = storage.slot_generations if writer.tracks_generations else None
    if stamps is not None:
        changed = _ring(a, after + k, capacity)
        stamps.index_add_(0, changed, torch.ones_like(changed))


def _undo_overwrite(storage: Rows, writer: Cursor, ranges: Ranges, journal: Journal) -> None:
    """Counters back to ``journal``; visible rows of ``ranges`` replaced by whole rows."""
    cells = writer.counters.cells
    cells[0], cells[1] = journal[0], journal[1]
    length = storage.counters.cells
    length[0] = visible = journal[2]
    length[1] += 1  # the content changed (the mutation revision)
    capacity = storage.max_size_along_dim0
    a, b, c, d = ranges
    runs = [(lo, min(hi, visible)) for lo, hi in ((a, b), (c, d)) if lo < min(hi, visible)]
    if not runs:  # a first fill: the rows it wrote are past the length
        return
    keep = torch.ones(visible, dtype=torch.bool)
    for lo, hi in runs:
        keep[lo:hi] = False
    whole = torch.nonzero(keep).reshape(-1)
    if not whole.numel():  # it overwrote every row: nothing whole is left to show
        length[0] = 0
        cells[0] = 0
        return
    # the whole rows nearest before the first overwritten one, in ring order
    before = whole[torch.argsort((whole - a).remainder(capacity))]
    torn = sum(hi - lo for lo, hi in runs)
    r = min(torn, int(before.numel()))
    source = before[-r:].repeat(-(-torn // r))[:torn]
    if storage.batch_leaves(storage.get(source[:1])) is None:  # not laid out in rows
        _log.warning(
            "a writer died overwriting rows [%d, %d) and [%d, %d) of a shared %s, which "
            "cannot move rows to mend them: those rows may be torn",
            *ranges,
            type(storage).__name__,
        )
        return
    at = 0
    for lo, hi in runs:
        _move(storage, source[at : at + hi - lo], lo)
        at += hi - lo
    stamps = storage.slot_generations if writer.tracks_generations else None
    if stamps is not None:
        changed = torch.cat([torch.arange(lo, hi) for lo, hi in runs])
        stamps.index_add_(0, changed, torch.ones_like(changed))


def _ring(start: int, n: int, capacity: int) -> torch.Tensor:
    return torch.arange(start, start + n).remainder_(capacity)


def _move(storage: Rows, source: torch.Tensor, start: int) -> None:
    """Copy the rows ``source`` (in order) to the rows ``start ..`` (wrapping)."""
    capacity = storage.max_size_along_dim0
    leaves = storage.batch_leaves(storage.get(source))
    if leaves is None:
        raise RuntimeError(f"{type(storage).__name__} cannot move rows to reclaim them")
    n = int(source.numel())
    head = min(n, capacity - start)
    storage.write_leaves(start, [t[:head] for t in leaves])
    if head < n:
        storage.write_leaves(0, [t[head:] for t in leaves])
