"""The live set: which slots may still be sampled under consume-after-n."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rbdata.samplers._consumed_ring import _ConsumedRing
from rbdata.samplers._distinct import distinct_sorted


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
    distinct = distinct_sorted(positions)
    if distinct.size == k:  # no repeat drawn: i.i.d. draws conditioned on distinct
        return positions
    while distinct.size < k:
        extra = torch.randint(n, (k - distinct.size,), generator=generator).numpy()
        distinct = distinct_sorted(np.concatenate([distinct, extra]))
    shuffled: np.ndarray = distinct[torch.randperm(k, generator=generator).numpy()]
    return shuffled


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
        self._consumed = _ConsumedRing()

    def _allocate(self, capacity: int) -> None:
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
        counts, pos, live = self._counts_np, self._pos_np, self._live_np
        self._allocate(max(capacity, 2 * old))
        self._consumed.grow(self._counts_np.size)
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
        new = flat[self._pos_np[flat] < 0]
        if new.size > 1:
            # Drop repeats in O(m): the position map serves as scratch (the last one wins).
            order = np.arange(new.size)
            self._pos_np[new] = order
            new = new[self._pos_np[new] == order]
            self._pos_np[new] = -1
        if new.size:
            self._consumed.refill(new)  # written: no longer consumed (none is live)
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
        """Mark ``slots`` (they just left the set) consumed: new writes may reuse them."""
        self._consumed.mark(slots)

    def consumed(self, k: int) -> torch.Tensor:
        """Up to ``k`` distinct consumed slots, in ring order from the reuse position.

        The reuse position is the slot after the last consumed slot written
        again (slot 0 at first); the slots follow it upwards, wrapping around,
        skipping the slots that are not consumed (see ``_consumed_ring``). A
        slot stays consumed until it is written again. Looking changes nothing.
        """
        return torch.from_numpy(self._consumed.first(k))

    # ------------------------------------------------------------ removal
    def remove(self, indices: torch.Tensor) -> None:
        """Remove ``indices`` from the live array (non-live ones are ignored)."""
        flat = torch.as_tensor(indices, dtype=torch.long).reshape(-1).numpy()
        flat = flat[self.is_live(torch.from_numpy(flat)).numpy()]
        if flat.size:
            self._remove_live(distinct_sorted(flat))

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
        self._consumed.clear()

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Return the counts, the live slots in their order, the consumed slots, the reuse position.

        ``"freed"`` lists the consumed slots in the order new writes take them.
        """
        return {
            "n": self.n,
            "counts": self._counts.clone(),
            "live": self.live.clone(),
            "freed": self.consumed(self._counts_np.size).clone(),
            "reuse_at": self._consumed.reuse_at,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output exactly, order included (missing keys: defaults).

        Raises:
            ValueError: if the reuse position is not an int >= 0 (nothing is changed then).
        """
        reuse_at = state_dict.get("reuse_at", 0)
        if isinstance(reuse_at, torch.Tensor) and reuse_at.numel() == 1:
            reuse_at = reuse_at.item()
        if type(reuse_at) is not int or reuse_at < 0:
            raise ValueError(f"the live set's reuse_at must be an int >= 0, got {reuse_at!r}.")
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
        self._consumed = _ConsumedRing()
        self._consumed.grow(max(capacity, int(freed.max()) + 1 if freed.numel() else 0))
        self._free(distinct_sorted(freed.numpy()))  # each slot once
        self._consumed.reuse_at = reuse_at
