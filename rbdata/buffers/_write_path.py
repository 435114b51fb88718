"""The write path of a replay buffer: ``add``, ``extend`` (consumed slots first), ``empty``."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection

from rbdata.buffers._components import _Components
from rbdata.buffers._coordinates import cells_of_rows, to_coordinates
from rbdata.buffers._deferred_write import _DeferredWrites
from rbdata.sharing.faults import armed, fault_point
from rbdata.writers._base import batch_len, slice_batch


class WriteHooks:
    """What a buffer class does around its writes; the plain buffer does nothing.

    :class:`~rbdata.TensorDictReplayBuffer` strips a sampled batch's info
    entries (:meth:`prepare`); the prioritized TensorDict buffer reads
    priorities from the data (:meth:`validate`, before anything is written,
    and :meth:`after`, once the slots are known).

    Examples:
        >>> WriteHooks().prepare([1, 2])
        [1, 2]
    """

    def prepare(self, data: Any) -> Any:
        """``data`` as the buffer writes it, before the inverse transforms."""
        return data

    def validate(self, data: Any, update_priority: bool | None) -> None:
        """Raise for ``data`` the buffer refuses, before anything is written."""

    def after(self, data: Any, index: torch.Tensor, update_priority: bool | None) -> None:
        """Work once ``data`` is written at ``index`` (flat cells)."""


class _WritePath(_DeferredWrites):
    """The write half of :class:`~rbdata.ReplayBuffer`: every change of what the buffer holds.

    Writes validate the data (and the sampler's room) before anything is
    written, go into consumed slots first under ``consume_after_n_samples``,
    then at the writer's cursor, and tell the sampler and sample unit what was
    written. The buffer class hooks in through its :class:`WriteHooks`
    (prioritized TensorDict buffers read priorities from the data).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4))
        >>> rb.extend(torch.arange(3)).tolist(), rb.add(torch.tensor(7)), len(rb)
        ([0, 1, 2], 3, 4)
    """

    def __init__(self, components: _Components, hooks: WriteHooks) -> None:
        self._components = components
        self.hooks = hooks

    def add(self, data: Any) -> int | torch.Tensor:
        """Add one element; return its slot (``ndim > 1``: its cells' coordinates)."""
        c = self._components
        c.init()
        if is_tensor_collection(data) and data.ndim and c.storage.ndim == 1:
            warnings.warn(
                f"Using `add()` with a TensorDict that has batch_size={data.batch_size}: it is "
                "stored as one element. Use `extend()` to add multiple elements, or `add()` "
                "with a single element (batch_size=torch.Size([])).",
                UserWarning,
                stacklevel=4,
            )
        data = self.hooks.prepare(data)
        storage = c.storage
        batch = storage.item_as_batch(data)
        if batch is not None:
            index = self._extend(batch, None)
            if storage.ndim > 1:
                return index
            return int(index[0]) if index.numel() else -1
        sync = c.sync
        with sync.cond:
            if len(c.transform):
                data = c.transform.inv(data)
            c.catch_up()
            free = c.sampler.reusable_slots(1) if c.consume_after_n is not None else None
            writer = c.writer
            journal = None
            if not sync.shared:
                pass
            elif free is not None and free.numel():
                at = int(free[0])
                journal = sync.overwriting((at, at + 1, 0, 0))
            elif writer.writes_in_ring_order:
                journal = sync.overwriting_next(1)
            try:
                if free is not None and free.numel():
                    slot = int(writer.write_at(free, [data])[0])
                else:
                    slot = writer.add(data)
                c.note_written(torch.tensor([slot]))
                c.feed.skip_to(writer.write_count)
                fault_point("locked-before-commit")
            finally:
                sync.overwritten(journal)
            sync.cond.notify_all()
        return slot

    def extend(self, data: Any, update_priority: bool | None) -> torch.Tensor:
        """Extend with a batch; return the written slots (``ndim > 1``: coordinates)."""
        c = self._components
        if not c.initialized:
            c.init()
        dim = c.dim_extend_arg  # c.dim_extend, without its call (the components are built)
        if dim is None:
            dim = c.storage.ndim - 1
        return self._extend(c.storage.as_batch(self.hooks.prepare(data), dim), update_priority)

    def _extend(self, data: Any, update_priority: bool | None) -> torch.Tensor:
        index = self._extend_deferred(data, update_priority)  # shared buffers' ring writes
        if index is not None:
            return index
        c = self._components
        with c.sync.cond:
            transform = c.transform
            if len(transform):
                data = transform.inv(data)
            storage = c.storage
            if _is_empty(data):
                ndim = storage.ndim
                return torch.empty((0, ndim) if ndim > 1 else 0, dtype=torch.long)
            self.hooks.validate(data, update_priority)
            self._check_sampler_fits(data)
            c.catch_up()
            journal: list[int | None] = []  # the write's journal (shared buffers)
            try:
                index = self._write(data, journal)
                writer = c.writer
                c.note_written(index[index >= 0] if writer.drops_items else index)
                c.feed.skip_to(writer.write_count)
                where = index if storage.ndim == 1 else cells_of_rows(index, c.cells_per_item())
                self.hooks.after(data, where, update_priority)
                fault_point("locked-before-commit")
            finally:
                for slot in journal:
                    c.sync.overwritten(slot)
            c.sync.cond.notify_all()
        return index if storage.ndim == 1 else to_coordinates(where, c.storage_shape())

    def _validate_extend(self, data: object, update_priority: bool | None) -> None:
        self.hooks.validate(data, update_priority)

    def _after_extend(
        self, data: object, index: torch.Tensor, update_priority: bool | None
    ) -> None:
        self.hooks.after(data, index, update_priority)

    def _check_sampler_fits(self, data: Any) -> None:
        """ValueError, before anything is written, if the write would pass the sampler's slots.

        A prioritized sampler keeps one priority per stored cell, for the
        cells ``[0, cell_capacity)`` (torchrl's tree size: the smallest power of
        two above ``max_capacity``); a storage may be larger (torchrl lets a
        small sampler sit on the default ``ListStorage(1000)``) as long as the
        writes stay below it. Writes go from the writer's cursor, wrapping at
        the storage's capacity.
        """
        c = self._components
        slots = c.sampler.cell_capacity
        if slots is None:
            return
        lead, rows = self._storage_rows(data)
        top_row = min(c.writer.cursor + batch_len(data), rows) - 1
        cells = (top_row + 1) * lead
        if cells > slots:
            storage = c.storage
            raise ValueError(
                f"sampler={type(c.sampler).__name__}(max_capacity={c.sampler.max_capacity}) "
                f"has {slots} slots, fewer than this write needs: it would fill cells up to "
                f"{cells} of "
                f"{type(storage).__name__}(max_size={storage.max_size}, "
                f"ndim={storage.ndim}), which holds {rows * lead}; pass "
                f"max_capacity={rows * lead}. Nothing was written."
            )

    def _storage_rows(self, data: Any) -> tuple[int, int]:
        """``(cells per item, items)`` of the storage when full (``ndim > 1``: from ``data``)."""
        c = self._components
        storage = c.storage
        if storage.ndim == 1:
            return 1, int(storage.max_size)
        if storage.initialized:
            return c.cells_per_item(), c.storage_shape()[0]
        if not (isinstance(data, torch.Tensor) or is_tensor_collection(data)):
            return 1, int(storage.max_size)  # a PyTree: the storage learns its cells at the write
        lead = int(math.prod(tuple(data.shape)[1 : storage.ndim]))
        return lead, -(-int(storage.max_size) // lead)

    def _write(self, data: Any, journal: list[int | None]) -> torch.Tensor:
        """Write a batch: into consumed slots first (consume-after-n), then at the cursor.

        The consumed slots a batch reuses take its items in ring order from the
        sampler's reuse position (``Sampler.reusable_slots``). A shared buffer
        journals the rows each part overwrites first (``journal`` gets the
        slots, :meth:`~rbdata.sharing.sync._BufferSync.overwriting`), so that
        a process killed mid-copy leaves no torn row.
        """
        c = self._components
        writer = c.writer
        if c.consume_after_n is None or writer.write_at is None:
            return self._at_cursor(data, journal)
        n = batch_len(data)
        free = c.sampler.reusable_slots(n)
        if not free.numel():
            return self._at_cursor(data, journal)
        k = free.numel()
        if k < n:
            capacity = c.storage.max_size_along_dim0
            at_cursor = (torch.arange(n - k) + writer.cursor) % capacity
            if bool(torch.isin(at_cursor, free).any()):  # the cursor would overwrite them
                return self._at_cursor(data, journal)
            c.storage.validate(data, True)  # both parts or neither
        head = self._at_slots(free, slice_batch(data, slice(0, k)) if k < n else data, journal)
        if k == n:
            return head
        return torch.cat([head, self._at_cursor(slice_batch(data, slice(k, None)), journal)])

    def _at_cursor(self, data: Any, journal: list[int | None]) -> torch.Tensor:
        """``writer.extend(data)``, journaled first when the writer writes in ring order."""
        c = self._components
        writer = c.writer
        sync = c.sync
        if sync.shared and writer.writes_in_ring_order:
            n = batch_len(data)
            while journal:  # consumed slots written first: that part is done (committed)
                sync.overwritten(journal.pop())
            journal.append(sync.overwriting_next(n))
            if armed("locked-mid-copy") and n > 1:  # a fault test: half copied, then killed
                head = writer.extend(slice_batch(data, slice(0, n // 2)))
                fault_point("locked-mid-copy")
                return torch.cat([head, writer.extend(slice_batch(data, slice(n // 2, None)))])
        return writer.extend(data)

    def _at_slots(self, free: torch.Tensor, data: Any, journal: list[int | None]) -> torch.Tensor:
        """``writer.write_at(free, data)``, journaled first, two runs of slots at a time.

        A write into consumed slots scattered in more than two runs commits
        each pair of runs in turn (the journal names two ranges), and one that
        goes on at the cursor commits its consumed slots first: one journal is
        open at a time, so a dead write is undone from whole rows only.
        """
        c = self._components
        writer = c.writer
        assert writer.write_at is not None
        if not c.sync.shared:
            return writer.write_at(free, data)
        runs = _runs(free)
        if len(runs) > 2:
            c.storage.validate(data, True)  # every part or none
        done: list[torch.Tensor] = []
        at = 0
        for i in range(0, len(runs), 2):
            pair = runs[i : i + 2]
            a, b = pair[0]
            c_, d = pair[1] if len(pair) > 1 else (0, 0)
            if journal:  # the pair before is done: committed
                c.sync.overwritten(journal.pop())
            journal.append(c.sync.overwriting((a, b, c_, d)))
            k = (b - a) + (d - c_)
            slots, part = free[at : at + k], slice_batch(data, slice(at, at + k))
            if armed("locked-mid-copy") and k > 1:  # a fault test: half copied, then killed
                done.append(writer.write_at(slots[: k // 2], slice_batch(part, slice(0, k // 2))))
                fault_point("locked-mid-copy")
                slots, part = slots[k // 2 :], slice_batch(part, slice(k // 2, None))
            done.append(writer.write_at(slots, part))
            at += k
        return torch.cat(done) if len(done) > 1 else done[0]

    def empty(self, empty_write_count: bool) -> None:
        """Empty the buffer and reset the cursor to 0."""
        c = self._components
        with c.sync.cond:
            c.init()
            c.prefetcher.drain()
            c.storage.empty()
            c.writer._empty(empty_write_count)
            c.sampler._empty()
            c.sample_unit._empty()
            c.feed.skip_to(c.writer.write_count)
            c.sync.cond.notify_all()


def _runs(slots: torch.Tensor) -> list[tuple[int, int]]:
    """``slots`` (in write order) as runs ``[first, stop)`` of consecutive slots.

    Examples:
        >>> _runs(torch.tensor([5, 6, 7, 0, 1, 4]))
        [(5, 8), (0, 2), (4, 5)]
    """
    if slots.numel() == 1:
        first = int(slots[0])
        return [(first, first + 1)]
    breaks = (torch.nonzero(slots[1:] - slots[:-1] != 1).reshape(-1) + 1).tolist()
    starts = [0, *breaks]
    stops = [*breaks, int(slots.numel())]
    firsts = slots[starts].tolist()
    return [(f, f + stop - start) for f, start, stop in zip(firsts, starts, stops, strict=True)]


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
