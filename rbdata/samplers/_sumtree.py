"""A wide sum tree over torch tensors, vectorized across the batch."""

from __future__ import annotations

import numpy as np
import torch

_SHIFT = 5
_FANOUT = 1 << _SHIFT
_MAX_TOP = 32768
# Stored dtypes; any other floating dtype is stored as float32 (a float16 prefix sum over a
# large tree cannot resolve single leaves, and numpy has no bfloat16 view).
_STORED_FLOATS = (torch.float32, torch.float64)
_AT = {"amax": np.maximum, "amin": np.minimum}


def _level_sizes(capacity: int) -> list[int]:
    """Node counts of each level, top first.

    Every level but the top is padded to a multiple of the fan-out; levels are
    added until the top has at most ``_MAX_TOP`` nodes (a small tree is flat).
    """
    sizes = []
    count = capacity
    while count > _MAX_TOP:
        padded = -(-count // _FANOUT) * _FANOUT
        sizes.append(padded)
        count = padded // _FANOUT
    sizes.append(count)
    return sizes[::-1]


class _SumTree:
    """Sums and the positive minimum (optionally the maximum) of non-negative leaves.

    Level ``d`` holds node values ``_sum[d]``; node ``i`` of level ``d`` has
    children ``32*i .. 32*i + 31`` in level ``d+1``, so
    ``_sum[d+1].view(-1, 32)[i]`` are its children. The top level is not
    reduced to a single root: it is kept flat (at most ``_MAX_TOP`` nodes) and
    searched through its prefix sums, which costs less than the extra descent
    steps it replaces. At 1M leaves there are two levels: 31,250 top nodes
    over 1M leaves.

    An update writes the leaves, then recomputes each affected parent sum (and
    maximum) from its children: no incremental drift. Sampling descends every
    draw at once, one level per step. The prefix sums of the top level are
    computed once after a change and reused until the next one (an
    ``exhausted`` check and the following ``sample`` share them).

    The minimum ignores zero leaves (they are never sampled): :attr:`min` is
    the smallest positive leaf (``inf`` when none is positive). It is kept
    with the leaf that holds it: an update only compares its new values with
    it, unless it overwrites that leaf, in which case the minimum is
    recomputed when next asked for, from the parents' minima (``_min``, one
    level per parent level) refreshed for the parents written since the last
    recomputation (``_dirty``). So an update costs no minimum maintenance,
    and a recomputation costs what the updates since the last one skipped.

    The levels are torch tensors; the per-batch bookkeeping on a few hundred
    entries (gathers, scatters, arithmetic) goes through numpy views of them,
    which costs a fraction of a torch call each, while the row reductions,
    cumulative sums and batched searches stay in torch.

    Args:
        capacity: number of leaves.
        dtype: floating dtype of the stored values (float32 or float64; other
            floating dtypes are stored as float32).
        track_max: also maintain the maximum leaf (:attr:`max`).
    """

    def __init__(self, capacity: int, dtype: torch.dtype = torch.float, track_max: bool = False):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}.")
        if not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating dtype, got {dtype}.")
        self.capacity = capacity
        self.dtype = dtype if dtype in _STORED_FLOATS else torch.float32
        sizes = _level_sizes(capacity)
        self._sum = [torch.zeros(s, dtype=self.dtype) for s in sizes]
        # Parent levels only: a leaf's own value is its minimum and maximum.
        self._min = [torch.full((s,), float("inf"), dtype=self.dtype) for s in sizes[:-1]]
        self._max = [torch.zeros(s, dtype=self.dtype) for s in sizes[:-1]] if track_max else None
        # numpy views sharing the tensors' memory.
        self._s = [t.numpy() for t in self._sum]
        self._m = [t.numpy() for t in self._min]
        self._x = [t.numpy() for t in self._max] if self._max is not None else None
        self._dirty = np.zeros(sizes[-2] if len(sizes) > 1 else 0, dtype=bool)
        self._min_value: float | None = float("inf")  # None: to recompute
        self._argmin = -1  # a leaf holding the minimum (-1: none is positive)
        self._ones = np.ones(_FANOUT, dtype=self._s[0].dtype)  # row sums as one BLAS call
        self._leaves = self._sum[-1][:capacity]
        # Exclusive prefix sums of the top level, prefix[i] = sum(top[:i]) (length top + 1),
        # recomputed lazily after a change. Searching the inclusive sums but the last one
        # (``_search``) lands in [0, top) without a clamp.
        self._prefix = torch.zeros(sizes[0] + 1, dtype=self.dtype)
        self._inclusive = self._prefix[1:]
        self._p = self._prefix.numpy()
        self._search = self._p[1:-1]
        self._prefix_ok = True
        self._strata_k = np.zeros(0, dtype=self._s[0].dtype)

    # ------------------------------------------------------------ summaries
    @property
    def leaves(self) -> torch.Tensor:
        """The leaf values (a view; change them with :meth:`update`)."""
        return self._leaves

    def _top_prefix(self) -> np.ndarray:
        """The exclusive prefix sums of the top level (cached until the next change)."""
        if not self._prefix_ok:
            torch.cumsum(self._sum[0], 0, out=self._inclusive)
            self._prefix_ok = True
        return self._p

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._top_prefix()[-1])

    @property
    def min(self) -> float:
        """Smallest positive leaf (``inf`` when no leaf is positive)."""
        if self._min_value is None:
            self._recompute_min()
        return self._min_value

    @property
    def max(self) -> float:
        """Largest leaf (needs ``track_max=True``)."""
        if self._x is None:
            raise RuntimeError("this tree was built with track_max=False.")
        return float((self._x[0] if self._x else self._s[0]).max())

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        return self._leaves[index]

    @staticmethod
    def _rows_min(rows: np.ndarray) -> np.ndarray:
        return torch.from_numpy(rows).amin(1).numpy()

    def _recompute_min(self) -> None:
        """Refresh the parents' minima written since the last time, then find the minimum."""
        leaves = self._s[-1]
        if not self._m:  # a flat tree: the leaves are the top
            positive = np.where(leaves > 0, leaves, np.inf)
        else:
            node = np.flatnonzero(self._dirty)
            self._dirty[node] = False
            rows = leaves.reshape(-1, _FANOUT).take(node, axis=0)
            rows[rows == 0] = np.inf
            self._m[-1][node] = self._rows_min(rows)
            for depth in range(len(self._m) - 2, -1, -1):
                node = node >> _SHIFT
                rows = self._m[depth + 1].reshape(-1, _FANOUT).take(node, axis=0)
                self._m[depth][node] = self._rows_min(rows)
            positive = self._m[0]
        node = int(positive.argmin())
        self._min_value = float(positive[node])
        if self._min_value == float("inf"):
            self._argmin = -1
            return
        below = (*self._m[1:], leaves) if self._m else ()
        for level in below:  # descend to a leaf holding the minimum
            row = level[node << _SHIFT : (node + 1) << _SHIFT]
            node = (node << _SHIFT) + int(np.where(row > 0, row, np.inf).argmin())
        self._argmin = node

    # ------------------------------------------------------------ writes
    def update(
        self,
        index: torch.Tensor,
        values: torch.Tensor,
        reduce: str | None = None,
        positive: bool = False,
    ) -> None:
        """Set ``leaves[index] = values`` and refresh their ancestors.

        Args:
            index: 1-D LongTensor of leaves in ``[0, capacity)``.
            values: non-negative values, same length as ``index``.
            reduce: None when duplicate indices carry the same value; else
                ``"amax"`` or ``"amin"``: how the values of a repeated index
                are merged.
            positive: the caller knows every value is > 0 (skips zero masking).
        """
        values = torch.as_tensor(values, dtype=self.dtype).reshape(-1)
        self.update_np(index.reshape(-1).numpy(), values.numpy(), reduce, positive)

    def update_np(
        self, index: np.ndarray, values: np.ndarray, reduce: str | None, positive: bool
    ) -> None:
        """:meth:`update` on numpy arrays (int64 index, values of the tree's dtype)."""
        if index.size == 0:
            return
        leaves = self._s[-1]
        leaves[index] = values
        if reduce is not None:
            # Repeated indices: the assignment kept one of their values, the ufunc merges the rest.
            _AT[reduce].at(leaves, index, values)
            values = leaves.take(index)
        self._refresh(index)
        if self._min_value is None:
            return
        if self._argmin >= 0 and (index == self._argmin).any():
            self._min_value = None  # the leaf holding the minimum changed
            return
        if not positive:
            values = np.where(values > 0, values, np.inf)
        low = int(values.argmin())
        if values[low] < self._min_value:
            self._min_value = float(values[low])
            self._argmin = int(index[low])

    def _refresh(self, index: np.ndarray) -> None:
        """Recompute the sums (and maxima) above the leaves ``index`` from their children."""
        self._prefix_ok = False
        node = index
        for depth in range(len(self._sum) - 2, -1, -1):
            node = node >> _SHIFT
            rows = self._s[depth + 1].reshape(-1, _FANOUT).take(node, axis=0)
            self._s[depth][node] = rows @ self._ones
            if depth + 2 == len(self._sum):
                self._dirty[node] = True  # the parents of written leaves
            elif self._x is not None:
                rows = self._x[depth + 1].reshape(-1, _FANOUT).take(node, axis=0)
            if self._x is not None:
                self._x[depth][node] = torch.from_numpy(rows).amax(1).numpy()

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace every leaf with ``values`` (length ``capacity``) and rebuild the tree."""
        self._prefix_ok = False
        self._sum[-1].zero_()
        self._leaves.copy_(values.to(self.dtype))
        for depth in range(len(self._sum) - 2, -1, -1):
            m = self._sum[depth + 1].numel() // _FANOUT
            self._s[depth][:m] = self._s[depth + 1].reshape(-1, _FANOUT) @ self._ones
            if self._max is not None:
                below = self._sum[-1] if depth + 2 == len(self._sum) else self._max[depth + 1]
                self._max[depth][:m] = below.view(-1, _FANOUT).amax(1)
        self._dirty[: self._sum[-1].numel() // _FANOUT] = True  # the parents with children
        self._min_value = None

    # ------------------------------------------------------------ sampling
    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """Return, for each ``mass`` in ``[0, total)``, the leaf whose prefix-sum range holds it.

        Leaf ``i`` is returned when ``sum(leaves[:i]) <= mass < sum(leaves[:i+1])``,
        so zero leaves are skipped; rounding may send a mass at the very end of
        a node's range onto one of its zero leaves (:meth:`sample` redraws those).

        Args:
            mass: 1-D tensor of masses.
        """
        mass = torch.as_tensor(mass, dtype=self.dtype).reshape(-1)
        return torch.from_numpy(self._find(mass.numpy()))

    def _find(self, mass: np.ndarray) -> np.ndarray:
        prefix = self._top_prefix()
        node = np.searchsorted(self._search, mass, side="right")
        last = len(self._sum) - 1
        if last == 0:
            return node
        mass = mass - prefix.take(node)  # the mass left inside the chosen node
        for depth in range(1, last + 1):
            rows = self._s[depth].reshape(-1, _FANOUT).take(node, axis=0)
            inclusive = torch.from_numpy(rows).cumsum_(1)
            child = torch.searchsorted(inclusive, torch.from_numpy(mass[:, None]), right=True)
            child = child.numpy().reshape(-1)
            np.minimum(child, _FANOUT - 1, out=child)
            node <<= _SHIFT
            node += child
            if depth < last:
                # Left of the child inside it: its inclusive sum minus its own value.
                flat = child + np.arange(0, child.size * _FANOUT, _FANOUT)
                inclusive = inclusive.numpy().reshape(-1).take(flat)
                mass = mass - inclusive + self._s[depth].take(node)
        return node

    def sample(self, k: int, generator: torch.Generator | None) -> torch.Tensor:
        """Draw ``k`` leaves proportionally to their value (see :meth:`sample_with_values`)."""
        return self.sample_with_values(k, generator)[0]

    def sample_with_values(
        self, k: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``k`` leaves with probability proportional to their value (stratified).

        Each draw falls in its own stratum ``[s/k, (s+1)/k) * total`` of the
        mass; strata are assigned to draws in random order, so the batch is
        not sorted by slot.

        Returns:
            ``(index, values)``: the leaves drawn and their values.

        Raises:
            RuntimeError: when every leaf is 0.
        """
        index, values = self.sample_np(k, generator)
        return torch.from_numpy(index), torch.from_numpy(values)

    def sample_np(self, k: int, generator: torch.Generator | None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`sample_with_values` returning numpy arrays."""
        total = self.total
        if not total > 0:
            raise RuntimeError("cannot sample: every priority is 0 (nothing is sampleable).")
        # Strata in increasing order make the searches and the row gathers walk memory
        # forward; the permutation afterwards hands the strata to the draws in random order.
        mass = torch.rand(k, generator=generator, dtype=self.dtype).numpy()
        mass += self._strata(k)
        mass *= total / k
        index = self._find(mass).take(torch.randperm(k, generator=generator).numpy())
        leaves = self._s[-1]
        values = leaves.take(index)
        while np.count_nonzero(values) < k:
            stray = values == 0
            redraw = torch.rand(int(stray.sum()), generator=generator, dtype=self.dtype).numpy()
            index[stray] = self._find(redraw * total)
            values = leaves.take(index)
        return index, values

    def _strata(self, k: int) -> np.ndarray:
        """``0, 1, ..., k - 1`` in the tree's dtype (cached for the last ``k``)."""
        if self._strata_k.size != k:
            self._strata_k = np.arange(k, dtype=self._s[0].dtype)
        return self._strata_k
