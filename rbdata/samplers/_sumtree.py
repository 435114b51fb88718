"""A wide sum tree in plain torch, vectorized across the batch."""

from __future__ import annotations

import torch

_SHIFT = 5
_FANOUT = 1 << _SHIFT
_MAX_TOP = 32768


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
    """Sums and positive minima (optionally maxima) of non-negative leaves in a wide tree.

    Level ``d`` holds node values ``_sum[d]``; node ``i`` of level ``d`` has
    children ``32*i .. 32*i + 31`` in level ``d+1``, so
    ``_sum[d+1].view(-1, 32)[i]`` are its children. The top level is not
    reduced to a single root: it is kept flat (at most ``_MAX_TOP`` nodes) and
    searched with one ``cumsum`` + ``searchsorted``, which costs less than
    the extra descent steps it replaces. At 1M leaves there are two levels:
    31,250 top nodes over 1M leaves.

    An update writes the leaves, then recomputes each affected parent as the
    sum (min, max) of its children: no incremental drift. Sampling descends
    every draw at once, one level per step. The prefix sums of the top level
    and the minimum are computed once after a change and reused until the
    next one (``exhausted`` checks and the following ``sample`` share them).

    The minimum ignores zero leaves (they are never sampled): :attr:`min` is
    the smallest positive leaf (``inf`` when none is positive).

    Args:
        capacity: number of leaves.
        dtype: floating dtype of the stored values.
        track_max: also maintain the maximum leaf (:attr:`max`).
    """

    def __init__(self, capacity: int, dtype: torch.dtype = torch.float, track_max: bool = False):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}.")
        if not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating dtype, got {dtype}.")
        self.capacity = capacity
        self.dtype = dtype
        sizes = _level_sizes(capacity)
        self._sum = [torch.zeros(s, dtype=dtype) for s in sizes]
        self._min = [torch.full((s,), float("inf"), dtype=dtype) for s in sizes]
        self._max = [torch.zeros(s, dtype=dtype) for s in sizes] if track_max else None
        self._inf = torch.tensor(float("inf"), dtype=dtype)
        # Exclusive prefix sums of the top level: _prefix[i] = sum(top[:i]), length top + 1.
        self._prefix = torch.zeros(sizes[0] + 1, dtype=dtype)
        self._prefix_ok = True
        self._min_value: float | None = None

    @property
    def leaves(self) -> torch.Tensor:
        """The leaf values (a view; change them with :meth:`update`)."""
        return self._sum[-1][: self.capacity]

    def _top_prefix(self) -> torch.Tensor:
        """The exclusive prefix sums of the top level (cached until the next change)."""
        if not self._prefix_ok:
            torch.cumsum(self._sum[0], 0, out=self._prefix[1:])
            self._prefix_ok = True
        return self._prefix

    def _changed(self) -> None:
        self._prefix_ok = False
        self._min_value = None

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._top_prefix()[-1])

    @property
    def min(self) -> float:
        """Smallest positive leaf (``inf`` when no leaf is positive)."""
        if self._min_value is None:
            self._min_value = float(self._min[0].amin())
        return self._min_value

    @property
    def max(self) -> float:
        """Largest leaf (needs ``track_max=True``)."""
        if self._max is None:
            raise RuntimeError("this tree was built with track_max=False.")
        return float(self._max[0].amax())

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        return self.leaves[index]

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
                are merged (``torch.Tensor.scatter_reduce_``).
            positive: the caller knows every value is > 0 (skips zero masking).
        """
        values = values.to(self.dtype)
        leaves = self._sum[-1]
        if reduce is None:
            leaves.index_copy_(0, index, values)
        else:
            leaves.scatter_reduce_(0, index, values, reduce, include_self=False)
            values = leaves.index_select(0, index)
        if self._max is not None:
            self._max[-1].index_copy_(0, index, values)
        self._min[-1].index_copy_(0, index, values if positive else self._positive(values))
        self._refresh(index)

    def _positive(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` with zeros replaced by ``inf`` (what the minimum levels hold)."""
        return torch.where(values > 0, values, self._inf)

    def _refresh(self, index: torch.Tensor) -> None:
        """Recompute the ancestors of the leaves ``index`` from their children."""
        self._changed()
        node = index
        for depth in range(len(self._sum) - 1, 0, -1):
            node = node >> _SHIFT
            kids = self._sum[depth].view(-1, _FANOUT).index_select(0, node)
            self._sum[depth - 1].index_copy_(0, node, kids.sum(1))
            kids = self._min[depth].view(-1, _FANOUT).index_select(0, node)
            self._min[depth - 1].index_copy_(0, node, kids.amin(1))
            if self._max is not None:
                kids = self._max[depth].view(-1, _FANOUT).index_select(0, node)
                self._max[depth - 1].index_copy_(0, node, kids.amax(1))

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace every leaf with ``values`` (length ``capacity``) and rebuild the tree."""
        values = values.to(self.dtype)
        self._changed()
        self._sum[-1].zero_()
        self._sum[-1][: self.capacity] = values
        self._min[-1].fill_(float("inf"))
        self._min[-1][: self.capacity] = self._positive(values)
        if self._max is not None:
            self._max[-1].copy_(self._sum[-1])
        for depth in range(len(self._sum) - 1, 0, -1):
            m = self._sum[depth].numel() // _FANOUT
            self._sum[depth - 1][:m] = self._sum[depth].view(-1, _FANOUT).sum(1)
            self._min[depth - 1][:m] = self._min[depth].view(-1, _FANOUT).amin(1)
            if self._max is not None:
                self._max[depth - 1][:m] = self._max[depth].view(-1, _FANOUT).amax(1)

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """Return, for each ``mass`` in ``[0, total)``, the leaf whose prefix-sum range holds it.

        Leaf ``i`` is returned when ``sum(leaves[:i]) <= mass < sum(leaves[:i+1])``,
        so zero leaves are skipped; rounding may send a mass at the very end of
        a node's range onto one of its zero leaves (:meth:`sample` redraws those).

        Args:
            mass: 1-D tensor of masses.
        """
        prefix = self._top_prefix()
        top = self._sum[0]
        mass = mass.to(self.dtype)
        node = torch.searchsorted(prefix[1:], mass, right=True).clamp_max_(top.numel() - 1)
        last = len(self._sum) - 1
        if last == 0:
            return node
        # The mass left inside the chosen node, as a column for the row-wise searches below.
        mass = torch.sub(mass, prefix.index_select(0, node)).unsqueeze_(1)
        node = node.unsqueeze_(1)
        for depth in range(1, last + 1):
            level = self._sum[depth]
            inclusive = level.view(-1, _FANOUT).index_select(0, node.squeeze(1)).cumsum_(1)
            child = torch.searchsorted(inclusive, mass, right=True).clamp_max_(_FANOUT - 1)
            if depth < last:
                mass = mass.sub_(inclusive.gather(1, child))
            node = child.add_(node, alpha=_FANOUT)
            if depth < last:
                mass = mass.add_(level.index_select(0, node.squeeze(1)).unsqueeze_(1))
        return node.squeeze(1)

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
        total = self.total
        if not total > 0:
            raise RuntimeError("cannot sample: every priority is 0 (nothing is sampleable).")
        mass = torch.randperm(k, generator=generator, dtype=self.dtype)
        mass.add_(torch.rand(k, generator=generator, dtype=self.dtype)).mul_(total / k)
        index = self.find(mass)
        values = self._sum[-1].index_select(0, index)
        while not bool(values.all()):
            stray = values == 0
            redraw = torch.rand(int(stray.sum()), generator=generator, dtype=self.dtype)
            index[stray] = self.find(redraw.mul_(total))
            values = self._sum[-1].index_select(0, index)
        return index, values
