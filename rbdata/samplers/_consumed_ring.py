"""The consumed slots under consume-after-n, handed out for reuse in ring order.

New items fill consumed slots first (``Sampler.reusable_slots``), as a ring
writer whose cursor only stops at free slots: from the *reuse position* (the
slot after the last consumed slot that was written again; slot 0 at first)
upwards, wrapping around, skipping every slot that is not consumed (live
items, slots never written). After a buffer was drained, every slot is
consumed and the next batch takes one contiguous run of slots (two at the
wrap point), which the writer copies as slices, as it does at its cursor.

The slots are marked in a bool mask with a summary of 64-slot blocks
(``True``: the block may hold a consumed slot; a block found empty when
looked at is cleared), so finding ``k`` slots costs O(blocks + k) numpy
work, never a Python step per slot; a run from the reuse position (after a
drain) is found in O(k). While fewer slots are consumed than there are
blocks (the steady state of sample-then-extend: a few hundred scattered
over a large buffer), the slots marked since all of them were last known
are kept in a list, and listing every consumed slot sorts those (O(k log k))
instead of scanning the summary.

Measured on a busy 2-core host (CPU time, one thread): rewriting a drained
``LazyTensorStorage(100_000)`` of transitions takes 8.6 ms (one slice copy
per leaf) where reusing the slots in the order they were consumed took 45 ms
(a scatter); ``sample(256)`` then ``extend(256)`` at 1M with 16-byte rows
took 210-222 us a step where the consumption-order queue took 167-177 us,
and 125-140 us against that queue's 142-160 us (paired runs) once the
distinct slots were found by sorting (:mod:`._distinct`) instead of ``np.unique``.
"""

from __future__ import annotations

import numpy as np

from rbdata.samplers._distinct import distinct_sorted

_SHIFT = 6
_BLOCK = 1 << _SHIFT  # slots per summary block


class _ConsumedRing:
    """Which slots are consumed, and the reuse position new items continue from.

    Examples:
        >>> import numpy as np
        >>> ring = _ConsumedRing()
        >>> ring.grow(10)
        >>> ring.mark(np.array([7, 2, 8, 3]))
        >>> ring.first(10).tolist()  # ring order from the reuse position (0)
        [2, 3, 7, 8]
        >>> ring.refill(np.array([2, 3, 7]))  # written again: the position moves past 7
        >>> ring.mark(np.array([1]))
        >>> ring.first(10).tolist()
        [8, 1]
    """

    def __init__(self) -> None:
        self._mask = np.zeros(0, dtype=bool)
        self._blocks = np.zeros(0, dtype=bool)
        #: where the search for consumed slots starts (the slot after the last one refilled)
        self.reuse_at = 0
        self._count = 0  # consumed slots
        # while few slots are consumed: the slots marked since every consumed slot was known
        # (some may be consumed no longer), so that listing them all skips the block summary
        self._recent: list[np.ndarray] | None = []
        self._recent_size = 0

    def __len__(self) -> int:
        return self._count

    def grow(self, capacity: int) -> None:
        """Make room for the slots ``0 .. capacity - 1`` (what is marked stays)."""
        blocks = -(-capacity // _BLOCK)
        old = self._blocks.size
        if blocks <= old:
            return
        mask = np.zeros(blocks * _BLOCK, dtype=bool)
        summary = np.zeros(blocks, dtype=bool)
        mask[: self._mask.size] = self._mask
        summary[:old] = self._blocks
        self._mask, self._blocks = mask, summary

    def mark(self, slots: np.ndarray) -> None:
        """Mark ``slots`` (distinct, within the grown capacity, not consumed) consumed."""
        if slots.size:
            self._mask[slots] = True
            self._blocks[slots >> _SHIFT] = True
            self._count += slots.size
            if self._recent is not None:
                self._recent_size += slots.size
                if self._recent_size > self._blocks.size:  # no longer few: the summary serves
                    self._recent, self._recent_size = None, 0
                else:
                    self._recent.append(slots.copy())  # the caller may change its array

    def refill(self, slots: np.ndarray) -> None:
        """``slots`` (distinct, within the grown capacity) were written: no longer consumed.

        When some were consumed, the reuse position moves past the last of
        those (in the order of ``slots``), so the next write continues the ring.
        """
        if not slots.size or not self._mask.size:
            return
        hit = self._mask[slots]
        refilled = int(np.count_nonzero(hit))
        if not refilled:
            return
        if refilled < slots.size:
            slots = slots[hit]
        self.reuse_at = int(slots[-1]) + 1
        self._mask[slots] = False
        self._count -= refilled

    def is_marked(self, slots: np.ndarray) -> np.ndarray:
        """A bool mask: which of ``slots`` (``>= 0``) are consumed."""
        inside = slots < self._mask.size
        out = np.zeros(slots.shape, dtype=bool)
        out[inside] = self._mask[slots[inside]]
        return out

    def clear(self) -> None:
        """Forget every consumed slot; the reuse position goes back to 0."""
        self._mask.fill(False)
        self._blocks.fill(False)
        self.reuse_at = 0
        self._count = 0
        self._recent, self._recent_size = [], 0

    def first(self, k: int) -> np.ndarray:
        """Up to ``k`` consumed slots in ring order from the reuse position (int64)."""
        size = self._mask.size
        if k <= 0 or not self._count:
            return np.zeros(0, dtype=np.int64)
        start = self.reuse_at if self.reuse_at < size else 0
        head = start >> _SHIFT
        if start and not (
            self._blocks[head + 1 :].any() or self._mask[start : (head + 1) << _SHIFT].any()
        ):
            start = head = 0  # nothing consumed from the position on: the ring goes on at 0
        if start + k <= size and self._mask[start : start + k].all():
            return np.arange(start, start + k, dtype=np.int64)  # a run (after a drain)
        if self._count <= k:
            return self._all_from(start)
        offset = start & (_BLOCK - 1)
        candidates = np.flatnonzero(self._blocks)
        cut = int(np.searchsorted(candidates, head))
        order = np.concatenate([candidates[cut:], candidates[:cut]])
        # the block holding the reuse position: its slots from the position come first,
        # those below it last (the ring comes back to it)
        split = offset and cut < candidates.size and candidates[cut] == head
        if split:
            order = np.append(order, head)
        rows = self._mask.reshape(-1, _BLOCK)
        last = order.size - 1
        found: list[np.ndarray] = []
        # blocks to look at first: enough for k slots at the mean density of the candidates
        density = self._count / candidates.size
        count, at, chunk = 0, 0, 8 + int(1.25 * k / density)
        while count < k and at < order.size:
            blocks = order[at : at + chunk]
            window = rows[blocks]
            flat = np.flatnonzero(window)  # row-major: ring order within the window
            if split and at == 0:  # the reuse position's block, slots below the position
                flat = flat[np.searchsorted(flat, offset) :]
            if split and at + blocks.size > last:  # the same block again, those slots only
                flat = flat[: np.searchsorted(flat, (last - at) * _BLOCK + offset)]
            flat = flat[: k - count]
            found.append((blocks[flat >> _SHIFT] << _SHIFT) + (flat & (_BLOCK - 1)))
            count += flat.size
            self._forget_empty(blocks, window)
            at, chunk = at + chunk, 2 * chunk
        out = found[0] if len(found) == 1 else np.concatenate(found)
        return out.astype(np.int64, copy=False)

    def _all_from(self, start: int) -> np.ndarray:
        """Every consumed slot, in ring order from ``start``."""
        recent = self._recent
        if recent is not None:  # few slots: those marked lately, still consumed, sorted
            marked = np.concatenate(recent) if len(recent) != 1 else recent[0]
            slots = distinct_sorted(marked[self._mask[marked]])
        else:
            blocks = np.flatnonzero(self._blocks)
            window = self._mask.reshape(-1, _BLOCK)[blocks]
            flat = np.flatnonzero(window)  # row-major: ascending
            slots = (blocks[flat >> _SHIFT] << _SHIFT) + (flat & (_BLOCK - 1))
            self._forget_empty(blocks, window)
        if slots.size <= self._blocks.size:  # every consumed slot, and few: listed from now on
            self._recent, self._recent_size = [slots.copy()], slots.size
        cut = int(np.searchsorted(slots, start))
        out = np.concatenate([slots[cut:], slots[:cut]]) if cut else slots
        return out.astype(np.int64, copy=False)

    def _forget_empty(self, blocks: np.ndarray, window: np.ndarray) -> None:
        """Clear the summary of the ``blocks`` whose rows (``window``) hold no consumed slot."""
        empty = ~window.view(np.uint64).any(axis=1)
        if empty.any():
            self._blocks[blocks[empty]] = False
