"""The live set: which slots may still be sampled under consume-after-n."""

from __future__ import annotations

from typing import Any

import torch

_EMPTY = torch.empty(0, dtype=torch.long)


def first_unique(values: torch.Tensor) -> torch.Tensor:
    """Return the distinct values of a 1-D tensor in the order of their first occurrence.

    Args:
        values: a 1-D integer tensor.

    Returns:
        The distinct entries of ``values``, ordered by where each first appears.
    """
    uniq, inverse = torch.unique(values, return_inverse=True)
    first = torch.full((uniq.numel(),), values.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(values.numel()), "amin")
    return uniq[first.argsort()]


class _LiveSet:
    """Per-slot sample counts and a compact array of the slots still sampleable.

    A slot is *live* from the moment it is written until it has been returned
    ``n`` times. The live slots are kept in a compact array (the first
    ``len(self)`` entries of ``_live``) with an inverse map ``_pos`` (slot ->
    position in the array, -1 when not live), so that adding, removing and
    drawing cost O(batch), never O(storage). The arrays grow on demand.

    Args:
        n: how many times an item is returned before it leaves the set.
    """

    def __init__(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise ValueError(f"consume_after_n must be a positive int, got {n!r}.")
        self.n = n
        self._counts = torch.zeros(0, dtype=torch.long)
        self._pos = torch.zeros(0, dtype=torch.long)
        self._live = torch.zeros(0, dtype=torch.long)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def live(self) -> torch.Tensor:
        """The live slots (a view; order is arbitrary)."""
        return self._live[: self._size]

    @property
    def counts(self) -> torch.Tensor:
        """How many times each known slot was returned since it was last written (a view)."""
        return self._counts

    def is_live(self, indices: torch.Tensor) -> torch.Tensor:
        """Return a bool mask telling which of ``indices`` are live."""
        inside = indices < self._pos.numel()
        out = torch.zeros(indices.shape, dtype=torch.bool)
        out[inside] = self._pos[indices[inside]] >= 0
        return out

    def _grow(self, capacity: int) -> None:
        old = self._pos.numel()
        if capacity <= old:
            return
        capacity = max(capacity, 2 * old)
        pad = capacity - old
        self._counts = torch.cat([self._counts, torch.zeros(pad, dtype=torch.long)])
        self._pos = torch.cat([self._pos, torch.full((pad,), -1, dtype=torch.long)])
        self._live = torch.cat([self._live, torch.zeros(pad, dtype=torch.long)])

    def add(self, indices: torch.Tensor) -> None:
        """Make ``indices`` live with a count of 0 (a written or rewritten slot).

        Already-live slots stay once in the live array; their count is reset.
        """
        indices = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
        if indices.numel() == 0:
            return
        if int(indices.min()) < 0:
            raise ValueError(f"indices must be >= 0, got min {int(indices.min())}.")
        self._grow(int(indices.max()) + 1)
        self._counts[indices] = 0
        new = torch.unique(indices[self._pos[indices] < 0])
        m = new.numel()
        if m:
            self._live[self._size : self._size + m] = new
            self._pos[new] = torch.arange(self._size, self._size + m)
            self._size += m

    def remove(self, indices: torch.Tensor) -> None:
        """Remove ``indices`` from the live array (non-live ones are ignored)."""
        indices = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
        indices = indices[self.is_live(indices)]
        if indices.numel():
            self._remove_live(torch.unique(indices))

    def _remove_live(self, indices: torch.Tensor) -> None:
        """Swap-remove distinct live ``indices``: O(len(indices)), about ten torch ops."""
        m = indices.numel()
        positions = self._pos[indices]
        new_size = self._size - m
        # Tail entries that stay live move into the holes left below new_size.
        in_tail = positions >= new_size
        stays = torch.ones(m, dtype=torch.bool)
        stays[positions[in_tail] - new_size] = False
        movers = self._live[new_size : self._size][stays]
        holes = positions[~in_tail]
        self._pos[indices] = -1
        self._live[holes] = movers
        self._pos[movers] = holes
        self._size = new_size

    def draw_distinct(self, k: int, generator: torch.Generator | None) -> torch.Tensor:
        """Draw ``min(k, len(self))`` distinct live slots uniformly at random.

        Expected cost O(k): draws with replacement and keeps the first
        occurrences (a uniform sample without replacement), falling back to a
        permutation of the live array when ``k`` is close to the live count.
        """
        size = self._size
        if 2 * k >= size:
            perm = torch.randperm(size, generator=generator)[:k]
            return self._live[perm]
        positions = torch.randint(size, (k,), generator=generator)
        distinct = torch.unique(positions)
        if distinct.numel() == k:  # the common case while k * k << size: no repeat drawn
            return self._live[positions]
        # Top up with fresh draws until k distinct: by symmetry the set is a
        # uniform k-subset; a permutation makes the order uniform too.
        while distinct.numel() < k:
            extra = torch.randint(size, (k - distinct.numel(),), generator=generator)
            distinct = torch.unique(torch.cat([distinct, extra]))
        return self._live[distinct[torch.randperm(k, generator=generator)]]

    def consume(self, indices: torch.Tensor) -> torch.Tensor:
        """Count one more return for each of ``indices`` (distinct); those reaching n leave.

        Returns:
            The slots that left the live set.
        """
        if self.n == 1:
            self._counts[indices] = 1
            self._remove_live(indices)
            return indices
        counts = self._counts[indices] + 1
        self._counts[indices] = counts
        done = indices[counts >= self.n]
        if done.numel():
            self._remove_live(done)
        return done

    def clear(self) -> None:
        """Forget every slot."""
        self._counts.zero_()
        self._pos.fill_(-1)
        self._size = 0

    def state_dict(self) -> dict[str, Any]:
        """Return the counts and live slots (plain values and tensors)."""
        return {"n": self.n, "counts": self._counts.clone(), "live": self.live.clone()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (missing keys keep their defaults)."""
        self.n = int(state_dict.get("n", self.n))
        counts = state_dict.get("counts", self._counts)
        live = torch.as_tensor(state_dict.get("live", self.live), dtype=torch.long)
        capacity = max(counts.numel(), int(live.max()) + 1 if live.numel() else 0)
        self._counts = torch.zeros(capacity, dtype=torch.long)
        self._counts[: counts.numel()] = counts
        self._pos = torch.full((capacity,), -1, dtype=torch.long)
        self._live = torch.zeros(capacity, dtype=torch.long)
        self._size = 0
        counts_kept = self._counts[live].clone()
        self.add(live)
        self._counts[live] = counts_kept
