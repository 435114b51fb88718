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
    every draw at once, one level per step.

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

    @property
    def leaves(self) -> torch.Tensor:
        """The leaf values (a view; change them with :meth:`update`)."""
        return self._sum[-1][: self.capacity]

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._sum[0].sum())

    @property
    def min(self) -> float:
        """Smallest positive leaf (``inf`` when no leaf is positive)."""
        return float(self._min[0].amin())

    @property
    def max(self) -> float:
        """Largest leaf (needs ``track_max=True``)."""
        if self._max is None:
            raise RuntimeError("this tree was built with track_max=False.")
        return float(self._max[0].amax())

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        return self.leaves[index]

    def update(self, index: torch.Tensor, values: torch.Tensor) -> None:
        """Set ``leaves[index] = values`` and refresh their ancestors.

        Args:
            index: 1-D LongTensor of leaves in ``[0, capacity)``. Duplicates
                are allowed when they carry the same value (reduce first).
            values: non-negative values, same length as ``index``.
        """
        values = values.to(self.dtype)
        self._sum[-1].index_copy_(0, index, values)
        self._min[-1].index_copy_(0, index, torch.where(values > 0, values, self._inf))
        if self._max is not None:
            self._max[-1].index_copy_(0, index, values)
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
        self._sum[-1].zero_()
        self._sum[-1][: self.capacity] = values
        self._min[-1].fill_(float("inf"))
        self._min[-1][: self.capacity] = torch.where(values > 0, values, self._inf)
        if self._max is not None:
            self._max[-1].copy_(self._sum[-1])
        for depth in range(len(self._sum) - 1, 0, -1):
            m = self._sum[depth].numel() // _FANOUT
            self._sum[depth - 1][:m] = self._sum[depth].view(-1, _FANOUT).sum(1)
            self._min[depth - 1][:m] = self._min[depth].view(-1, _FANOUT).amin(1)
            if self._max is not None:
                self._max[depth - 1][:m] = self._max[depth].view(-1, _FANOUT).amax(1)

    def find(self, mass: torch.Tensor, top_cumsum: torch.Tensor | None = None) -> torch.Tensor:
        """Return, for each ``mass`` in ``[0, total)``, the leaf whose prefix-sum range holds it.

        Leaf ``i`` is returned when ``sum(leaves[:i]) <= mass < sum(leaves[:i+1])``,
        so zero leaves are skipped; rounding may send a mass at the very end of
        a node's range onto one of its zero leaves (:meth:`sample` redraws those).

        Args:
            mass: 1-D tensor of masses.
            top_cumsum: ``cumsum`` of the top level, when the caller has it.
        """
        top = self._sum[0]
        cums = top.cumsum(0) if top_cumsum is None else top_cumsum
        mass = mass.to(self.dtype)
        node = torch.searchsorted(cums, mass, right=True).clamp_max_(top.numel() - 1)
        last = len(self._sum) - 1
        if last == 0:
            return node
        mass = (mass - cums.index_select(0, node)).add_(top.index_select(0, node)).unsqueeze(1)
        node = node.unsqueeze(1)
        for depth in range(1, last + 1):
            rows = self._sum[depth].view(-1, _FANOUT).index_select(0, node.squeeze(1))
            rows = rows.cumsum_(1)
            child = torch.searchsorted(rows, mass, right=True).clamp_max_(_FANOUT - 1)
            if depth < last:
                inclusive = rows.gather(1, child)
            node = child.add_(node, alpha=_FANOUT)
            if depth < last:
                own = self._sum[depth].index_select(0, node.squeeze(1)).unsqueeze(1)
                mass = (mass - inclusive).add_(own)
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
        cums = self._sum[0].cumsum(0)
        total = cums[-1]
        if not float(total) > 0:
            raise RuntimeError("cannot sample: every priority is 0 (nothing is sampleable).")
        mass = torch.randperm(k, generator=generator, dtype=self.dtype)
        mass.add_(torch.rand(k, generator=generator, dtype=self.dtype)).mul_(total / k)
        index = self.find(mass, cums)
        values = self._sum[-1].index_select(0, index)
        while not bool(values.all()):
            stray = values == 0
            redraw = torch.rand(int(stray.sum()), generator=generator, dtype=self.dtype)
            index[stray] = self.find(redraw.mul_(total), cums)
            values = self._sum[-1].index_select(0, index)
        return index, values
