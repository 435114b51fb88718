"""Recycled gather outputs: a batch's memory is reused once nothing references it.

Sampling a batch of large items (pixels) allocates a fresh multi-megabyte
tensor per batch. When that tensor is made on one thread (a prefetch thread)
and freed on another (the training loop), the allocator hands the memory back
to the kernel and faults it in again, page by page, on the next batch: a
few hundred page faults and a zero-fill per batch, on top of the copy itself.

:class:`_GatherPool` keeps the last few gather outputs and hands one out again
only when no tensor anywhere still uses its memory (the storage's reference
count says so: the batch, its leaves, views and numpy arrays made from them
all hold a reference). A batch a user keeps is therefore never overwritten;
it is simply not reused, and a new buffer is allocated instead. Memory that
was sent to another process (moved to shared memory) is never reused.

A buffer also keeps the views that cut it into a batch's leaves (made the
first time it is handed out, never handed out themselves): a batch's leaves
are aliases of them (one ``detach`` each), which costs a fraction of cutting
the rows anew, and since nobody ever gets hold of the views, nothing a user
does to a batch (in place, to its data, shapes, strides or grad state)
reaches the next one. The views count among the references of an unused
buffer; the aliases, like any tensor made from the batch, hold it in use.

The pool keeps its buffers in the order they were last handed out. When it
is full and every buffer is in use, it forgets the one handed out longest ago
(whoever holds it keeps it) and keeps the new one: a batch kept for good
(a reference batch, the last batch of a log) thus leaves the pool after one
miss instead of shrinking it for the rest of the run, which would make
every batch of a prefetching loop a fresh allocation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

_MAX_BUFFERS = 4
_MAX_BYTES = 512 * 2**20
# Present in every torch release rbdata supports; without it nothing is recycled.
_use_count: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)
_detach = torch.Tensor.detach

Split = Callable[[torch.Tensor, torch.Size], list[torch.Tensor]]


class _Entry:
    """One pooled buffer, its own views (never handed out), and its storage count when unused.

    Args:
        buffer: the pooled tensor (the pool's own reference).
    """

    __slots__ = ("buffer", "shape", "cdata", "address", "unused_count", "views", "leased")

    def __init__(self, buffer: torch.Tensor) -> None:
        self.buffer = buffer
        self.shape = tuple(buffer.shape)
        self.cdata = buffer.untyped_storage()._cdata  # valid while ``buffer`` holds it
        #: where the memory is: moving it to shared memory (``share_memory_``, which
        #: sending a tensor to another process does) copies it elsewhere and moves this
        self.address = buffer.data_ptr()
        # what holds the memory when nobody else does: the buffer, and the storage's Python
        # object when torch keeps it (measured, not assumed), then the pool's views too
        self.unused_count = 1 if _use_count is None else _use_count(self.cdata)
        self.views: list[torch.Tensor] | None = None
        self.leased = False  # handed out to gather_leaves, whose leaves do not hold it yet

    def nbytes(self) -> int:
        return self.buffer.untyped_storage().nbytes()

    def unused(self) -> bool:
        """Whether only the pool holds the memory (the buffer and the pool's own views).

        Every tensor made of it (a batch's leaves, views of them, numpy arrays,
        what autograd saved) holds the storage: its count says so. Memory moved
        to shared memory (a batch sent to another process) is never reused:
        the receiving process may still read it.
        """
        assert _use_count is not None
        return (
            not self.leased
            and _use_count(self.cdata) == self.unused_count
            and self.buffer.data_ptr() == self.address  # not moved to shared memory
        )


class _GatherPool:
    """Up to ``_MAX_BUFFERS`` gather outputs (``_MAX_BYTES`` in all), reused when unreferenced.

    :meth:`take` hands out a buffer. :meth:`gather_leaves` gathers rows into
    one and hands out their leaves: the buffer's own views (the leaves' layout, made once
    per buffer and never handed out, so nobody ever changes them) are
    aliased with one ``detach`` each, which costs a fraction of cutting the
    rows into leaves anew.

    Args:
        dtype: dtype of the gathered rows.
        device: device of the gathered rows.
    """

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self._dtype = dtype
        self._device = device
        self._entries: list[_Entry] = []
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, int]) -> torch.Tensor:
        """A tensor of ``shape`` that nothing else uses (its content is arbitrary)."""
        if _use_count is None:
            return self._empty(shape)
        with self._lock:  # the alias returned holds the memory before another thread looks
            entry = self._find(shape)
            if entry is None:
                entry = _Entry(self._empty(shape))
                self._keep(entry)
            return _detach(entry.buffer)  # an alias: cheaper than a view

    def _empty(self, shape: tuple[int, int]) -> torch.Tensor:
        return torch.empty(shape, dtype=self._dtype, device=self._device)

    def gather_leaves(
        self, source: torch.Tensor, index: torch.Tensor, split: Split
    ) -> list[torch.Tensor]:
        """The leaves of the rows ``index`` of ``source`` gathered into a buffer of the pool.

        Args:
            source: the rows (2-D, of the pool's dtype).
            index: 1-D int64 rows to gather (``IndexError`` for one outside ``source``).
            split: cuts a buffer into the leaves of a batch of shape ``index.shape``
                (called once per pooled buffer, for its views).

        Returns:
            Tensors that are the caller's own (aliases of the pool's views).
        """
        shape = (index.size(0), source.size(1))
        with self._lock:
            entries = self._entries
            entry = entries[-1] if entries else None  # most often the one handed out last
            if (
                entry is None
                or entry.leased
                or entry.shape != shape
                or _use_count(entry.cdata) != entry.unused_count  # type: ignore[misc]
                or entry.buffer.data_ptr() != entry.address  # moved to shared memory
            ):  # not :meth:`_Entry.unused` (inlined: it runs on every batch)
                entry = self._lease_entry(shape)
                if entry is None:
                    return split(torch.index_select(source, 0, index), index.shape)
            entry.leased = True
        try:  # the entry is leased: no other thread takes it until the leaves hold the memory
            torch.index_select(source, 0, index, out=entry.buffer)
            views = entry.views
            if views is None:
                views = split(entry.buffer, index.shape)
                # what holds the memory when unused: the buffer and the views (their bases)
                entry.unused_count = _use_count(entry.cdata)  # type: ignore[misc]
                entry.views = views
            return list(map(_detach, views))
        finally:
            entry.leased = False

    def _lease_entry(self, shape: tuple[int, int]) -> _Entry | None:
        """An unused pooled entry of ``shape`` (None when recycling is off or too big).

        Called under the lock, which the caller holds until it leases the entry.
        """
        if _use_count is None:
            return None
        entry = self._find(shape)
        if entry is None:
            entry = _Entry(self._empty(shape))
            if not self._keep(entry):
                return None
        return entry

    def _find(self, shape: tuple[int, int]) -> _Entry | None:
        """The most recently handed out unused entry of ``shape`` (moved last), if any."""
        entries = self._entries
        for i in range(len(entries) - 1, -1, -1):  # the most recent first: cache-warm
            entry = entries[i]
            if entry.shape == shape and entry.unused():
                if i != len(entries) - 1:
                    entries.append(entries.pop(i))  # the most recently handed out last
                return entry
        return None

    def _keep(self, fresh: _Entry) -> bool:
        """Pool ``fresh``, dropping entries to make room: unused ones first, else the oldest."""
        entries, size = self._entries, fresh.nbytes()
        if size > _MAX_BYTES:
            return False
        while len(entries) >= _MAX_BUFFERS or size + sum(e.nbytes() for e in entries) > _MAX_BYTES:
            unused = next((i for i, e in enumerate(entries) if e.unused()), 0)
            del entries[unused]  # an in-use one is only forgotten: its holder keeps it
        entries.append(fresh)
        return True
