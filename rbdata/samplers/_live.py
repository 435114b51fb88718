"""The live set: which slots may still be sampled under consume-after-n."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def first_unique(values: torch.Tensor) -> torch.Tensor:
    """Return the distinct values of a 1-D tensor in the order of their first occurrence.

    Args:
        values: a 1-D integer tensor (on any device; the result stays there).

    Returns:
        The distinct entries of ``values``, ordered by where each first appears.
    """
    uniq, inverse = torch.unique(values, return_inverse=True)
    first = torch.full((uniq.numel(),), values.numel(), dtype=torch.long, device=values.device)
    positions = torch.arange(values.numel(), device=values.device)
    first.scatter_reduce_(0, inverse, positions, "amin")
    ordered: torch.Tensor = uniq[first.argsort()]
    return ordered


def _distinct_positions(n: int, k: int, generator: torch.Generator | None) -> np.ndarray:
    """``k`` distinct positions of ``[0, n)``: a uniform k-subset, in uniformly random order.

    Expected cost O(k): draws with replacement and tops up the repeats (the
    distinct values of an i.i.d. uniform sequence form a uniform subset by
    symmetry); a permutation when ``k`` is a sizeable part of ``n``, where
    repeats would take several rounds.
    """
    if 4 * k >= n:
        return torch.randperm(n, generator=generator).numpy()[:k]
    positions = torch.randint(n, (k,), generator=generator).numpy()
    distinct = np.unique(positions)
    if distinct.size == k:  # no repeat drawn: i.i.d. draws conditioned on distinct
        return positions
    while distinct.size < k:
        extra = torch.randint(n, (k - distinct.size,), generator=generator).numpy()
        distinct = np.unique(np.concatenate([distinct, extra]))
    shuffled: np.ndarray = distinct[torch.randperm(k, generator=generator).numpy()]
    return shuffled


class _FreedQueue:
    """The slots that left the live set, in the order they left, each with a stamp.

    A slot gets a new stamp (one more than the last given) every time it is
    queued; an entry ``(slot, stamp)`` is stale once the slot was queued again
    (its current stamp differs) or written since (the owner tells, see
    :meth:`first_valid`). The entries are kept in two flat arrays with a head
    position: pushing appends a chunk (joined to the arrays on the next look),
    looking scans a window from the head with array operations, and the head
    moves past the stale entries it finds at the front, so a look costs
    O(k) amortized, never a Python step per slot.
    """

    def __init__(self) -> None:
        self._slots = np.zeros(0, dtype=np.int64)
        self._stamps = np.zeros(0, dtype=np.int64)
        self._head = 0
        self._pending: list[np.ndarray] = []
        self._clock = 0  # the next stamp
        self._joined = 0  # the stamp of the first pending entry

    def push(self, slots: np.ndarray) -> np.ndarray:
        """Queue ``slots`` (1-D int64); return the stamps they got."""
        stamps = np.arange(self._clock, self._clock + slots.size, dtype=np.int64)
        self._clock += slots.size
        self._pending.append(slots)
        return stamps

    def __len__(self) -> int:
        return self._slots.size - self._head + self._clock - self._joined

    def compact(self, valid: Any) -> None:
        """Drop every stale entry (``valid`` as in :meth:`first_valid`): O(len(self))."""
        self._join()
        slots, stamps = self._slots[self._head :], self._stamps[self._head :]
        keep = valid(slots, stamps)
        self._slots, self._stamps, self._head = slots[keep], stamps[keep], 0

    def _join(self) -> None:
        """Append the pending chunks to the arrays (dropping the entries the head passed)."""
        if not self._pending:
            return
        fresh = np.arange(self._joined, self._clock, dtype=np.int64)
        self._slots = np.concatenate([self._slots[self._head :], *self._pending])
        self._stamps = np.concatenate([self._stamps[self._head :], fresh])
        self._head, self._pending, self._joined = 0, [], self._clock

    def first_valid(self, k: int, valid: Any) -> np.ndarray:
        """The first ``k`` entries (at most) for which ``valid(slots, stamps)`` holds.

        Args:
            k: how many slots are wanted.
            valid: maps arrays of slots and stamps to a bool mask of the live entries.
        """
        self._join()
        size = self._slots.size
        found: list[np.ndarray] = []
        count, start, window = 0, self._head, max(2 * k, 64)
        while count < k and start < size:
            stop = min(start + window, size)
            slots = self._slots[start:stop]
            keep = valid(slots, self._stamps[start:stop])
            if start == self._head:  # stale entries at the front are dropped for good
                first = int(keep.argmax()) if keep.any() else keep.size
                self._head = start + first
            hit = slots[keep][: k - count]
            found.append(hit)
            count += hit.size
            start, window = stop, 2 * window
        if self._head == size and size:  # everything seen was stale
            self._slots, self._stamps, self._head = self._slots[:0], self._stamps[:0], 0
        if not found:
            return np.zeros(0, dtype=np.int64)
        return found[0] if len(found) == 1 else np.concatenate(found)


class _LiveSet:
    """Per-slot sample counts and a compact array of the slots still sampleable.

    A slot is *live* from the moment it is written until it has been returned
    ``n`` times. The live slots are kept in a compact array (the first
    ``len(self)`` entries of ``_live``) with an inverse map ``_pos`` (slot ->
    position in the array, -1 when not live); the arrays grow on demand.

    The array is kept in uniformly random order: given everything that
    happened so far, every arrangement of the live slots is equally likely.
    So the last ``k`` entries are a uniform sample of ``k`` distinct live
    slots, in uniformly random order, and drawing-and-consuming a batch
    (:meth:`take`) is a slice and a few scatters. The order stays uniform
    because every change either depends on positions only (removing the
    drawn tail; swap-removing given slots) or inserts slots at uniformly
    random positions (:meth:`_insert`: new writes, and drawn slots that
    stay live). Every operation costs O(batch), never O(storage).

    The index bookkeeping runs on numpy views of the torch tensors: on a few
    hundred entries a numpy call costs a fraction of a torch call.

    Args:
        n: how many times an item is returned before it leaves the set.
    """

    def __init__(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise ValueError(f"consume_after_n must be a positive int, got {n!r}.")
        self.n = n
        self._size = 0
        self._allocate(0)
        self._freed = _FreedQueue()

    def _allocate(self, capacity: int) -> None:
        # the stamp each slot got when it last left the set (see _FreedQueue)
        self._stamps_np = np.full(capacity, -1, dtype=np.int64)
        self._counts = torch.zeros(capacity, dtype=torch.long)
        self._pos = torch.full((capacity,), -1, dtype=torch.long)
        self._live = torch.zeros(capacity, dtype=torch.long)
        self._counts_np = self._counts.numpy()
        self._pos_np = self._pos.numpy()
        self._live_np = self._live.numpy()

    def __len__(self) -> int:
        return self._size

    @property
    def live(self) -> torch.Tensor:
        """The live slots (a view, in the set's random order)."""
        return self._live[: self._size]

    @property
    def counts(self) -> torch.Tensor:
        """How many times each known slot was returned since it was last written (a view)."""
        return self._counts

    def is_live(self, indices: torch.Tensor) -> torch.Tensor:
        """Return a bool mask telling which of ``indices`` are live."""
        flat = torch.as_tensor(indices, dtype=torch.long).numpy()
        inside = flat < self._pos_np.size
        out = np.zeros(flat.shape, dtype=bool)
        out[inside] = self._pos_np[flat[inside]] >= 0
        return torch.from_numpy(out)

    def is_consumed(self, indices: torch.Tensor) -> torch.Tensor:
        """A CPU bool mask: which of ``indices`` were returned n times since their last write.

        The counts live on the CPU: ``indices`` on a device are read back here.
        """
        flat = indices.cpu()
        inside = flat < self._counts.numel()
        consumed = torch.zeros(flat.shape, dtype=torch.bool)
        consumed[inside] = self._counts[flat[inside]] >= self.n
        return consumed

    def _grow(self, capacity: int) -> None:
        old = self._pos_np.size
        if capacity <= old:
            return
        counts, pos, live, stamps = self._counts_np, self._pos_np, self._live_np, self._stamps_np
        self._allocate(max(capacity, 2 * old))
        self._stamps_np[:old] = stamps
        self._counts_np[:old] = counts
        self._pos_np[:old] = pos
        self._live_np[:old] = live

    # ------------------------------------------------------------ writes
    def add(self, indices: torch.Tensor, generator: torch.Generator | None = None) -> None:
        """Make ``indices`` live with a count of 0 (a written or rewritten slot).

        Already-live slots keep their place in the array; their count is
        reset. New ones are inserted at uniformly random places, drawn with
        ``generator``.
        """
        flat = torch.as_tensor(indices, dtype=torch.long).reshape(-1).numpy()
        if flat.size == 0:
            return
        if int(flat.min()) < 0:
            raise ValueError(f"indices must be >= 0, got min {int(flat.min())}.")
        self._grow(int(flat.max()) + 1)
        self._counts_np[flat] = 0
        self._stamps_np[flat] = -1  # written: no longer consumed (their queue entries are stale)
        new = flat[self._pos_np[flat] < 0]
        if new.size > 1:
            # Drop repeats in O(m): the position map serves as scratch (the last one wins).
            order = np.arange(new.size)
            self._pos_np[new] = order
            new = new[self._pos_np[new] == order]
            self._pos_np[new] = -1
        if new.size:
            self._insert(new, generator)

    def _insert(self, items: np.ndarray, generator: torch.Generator | None) -> None:
        """Insert distinct non-live ``items`` so that the array's order stays uniform.

        The ``m`` items take ``m`` positions of ``[0, size + m)`` drawn as a
        uniform ordered subset; the live slots sitting on positions below
        ``size`` that were drawn move to the positions at or above ``size``
        that were not. Which positions the items take is uniform and
        independent of the current (uniform) arrangement, the items' order on
        them is uniform, and the move depends on positions only: the result is
        a uniform arrangement of the enlarged set.
        """
        size, m = self._size, items.size
        end = size + m
        spots = _distinct_positions(end, m, generator)
        if size:
            old = spots < size
            holes = spots[old]
            if holes.size:
                free = np.ones(m, dtype=bool)
                free[spots[~old] - size] = False
                free = np.flatnonzero(free) + size
                movers = self._live_np[holes]
                self._live_np[free] = movers
                self._pos_np[movers] = free
        self._live_np[spots] = items
        self._pos_np[items] = spots
        self._size = end

    # ------------------------------------------------------------ drawing
    def take(self, k: int, generator: torch.Generator | None) -> torch.Tensor:
        """Draw ``min(k, len(self))`` distinct live slots uniformly and count them as returned.

        The batch is the tail of the (uniformly ordered) array; slots reaching
        ``n`` returns leave the set, the others are put back at random places.

        Returns:
            The slots drawn, in random order.
        """
        size = self._size
        start = max(size - k, 0)
        batch = self._live_np[start:size].copy()
        self._size = start
        self._pos_np[batch] = -1
        if self.n == 1:  # a live slot has a count of 0: every drawn slot leaves
            self._counts_np[batch] = 1
            self._free(batch)
            return torch.from_numpy(batch)
        counts = self._counts_np[batch] + 1
        self._counts_np[batch] = counts
        done = counts >= self.n
        self._free(batch[done])
        stay = batch[~done]
        if stay.size:
            self._insert(stay, generator)
        return torch.from_numpy(batch)

    def draw_distinct(self, k: int, generator: torch.Generator | None) -> torch.Tensor:
        """Draw ``min(k, len(self))`` distinct live slots uniformly at random (no counting).

        The drawn slots stay live: they are put back at random places, so
        successive draws are independent.
        """
        size = self._size
        start = max(size - k, 0)
        batch = self._live_np[start:size].copy()
        self._size = start
        self._pos_np[batch] = -1
        self._insert(batch, generator)
        return torch.from_numpy(batch)

    def consume(self, indices: torch.Tensor) -> torch.Tensor:
        """Count one more return for each of ``indices`` (distinct, live); those reaching n leave.

        Returns:
            The slots that left the live set.
        """
        flat = torch.as_tensor(indices, dtype=torch.long).numpy()
        if self.n == 1:
            self._counts_np[flat] = 1
            self._remove_live(flat)
            self._free(flat.copy())
            return indices
        counts = self._counts_np[flat] + 1
        self._counts_np[flat] = counts
        done = flat[counts >= self.n]
        if done.size:
            self._remove_live(done)
            self._free(done)
        return torch.from_numpy(done)

    def _free(self, slots: np.ndarray) -> None:
        """Queue ``slots`` (they just left the set) for reuse by new writes."""
        if slots.size:
            self._stamps_np[slots] = self._freed.push(slots)
            if len(self._freed) > 2 * self._counts_np.size + 1024:  # nobody looked: stay bounded
                self._freed.compact(self._still_consumed)

    def consumed(self, k: int) -> torch.Tensor:
        """Up to ``k`` distinct consumed slots, those consumed first first.

        Slots stay queued until they are rewritten (a write makes a slot live
        again, and it is then dropped from the queue), so looking costs
        O(k) amortized and changes nothing.
        """
        return torch.from_numpy(self._freed.first_valid(k, self._still_consumed))

    def _still_consumed(self, slots: np.ndarray, stamps: np.ndarray) -> np.ndarray:
        """Which queued ``(slot, stamp)`` entries still hold a consumed slot (each slot once).

        A slot's stamp is the one of its last queueing until it is written
        (then -1), and only a write makes a consumed slot live again.
        """
        valid: np.ndarray = self._stamps_np[slots] == stamps
        return valid

    # ------------------------------------------------------------ removal
    def remove(self, indices: torch.Tensor) -> None:
        """Remove ``indices`` from the live array (non-live ones are ignored)."""
        flat = torch.as_tensor(indices, dtype=torch.long).reshape(-1).numpy()
        flat = flat[self.is_live(torch.from_numpy(flat)).numpy()]
        if flat.size:
            self._remove_live(np.unique(flat))

    def _remove_live(self, indices: np.ndarray) -> None:
        """Swap-remove distinct live ``indices``: O(len(indices))."""
        m = indices.size
        positions = self._pos_np[indices]
        new_size = self._size - m
        # Tail entries that stay live move into the holes left below new_size.
        in_tail = positions >= new_size
        stays = np.ones(m, dtype=bool)
        stays[positions[in_tail] - new_size] = False
        movers = self._live_np[new_size : self._size][stays]
        holes = positions[~in_tail]
        self._pos_np[indices] = -1
        self._live_np[holes] = movers
        self._pos_np[movers] = holes
        self._size = new_size

    def clear(self) -> None:
        """Forget every slot."""
        self._counts_np.fill(0)
        self._pos_np.fill(-1)
        self._size = 0
        self._freed = _FreedQueue()
        self._stamps_np.fill(-1)

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Return the counts and the live slots in their order (plain values and tensors)."""
        freed = self.consumed(self._counts_np.size).numpy()  # only the slots still consumed
        return {
            "n": self.n,
            "counts": self._counts.clone(),
            "live": self.live.clone(),
            "freed": torch.from_numpy(freed.astype(np.int64)),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output exactly, order included (missing keys: defaults)."""
        self.n = int(state_dict.get("n", self.n))
        counts = torch.as_tensor(state_dict.get("counts", self._counts), dtype=torch.long)
        live = torch.as_tensor(state_dict.get("live", self.live), dtype=torch.long).clone()
        capacity = max(counts.numel(), int(live.max()) + 1 if live.numel() else 0)
        self._allocate(capacity)
        self._counts[: counts.numel()] = counts
        self._live[: live.numel()] = live
        self._pos[live] = torch.arange(live.numel())
        self._size = live.numel()
        freed = torch.as_tensor(state_dict.get("freed", []), dtype=torch.long)
        self._freed = _FreedQueue()
        self._free(freed.numpy().copy())
