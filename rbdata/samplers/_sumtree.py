"""The sum tree behind prioritized sampling: numpy fast paths on the CPU, pure torch elsewhere.

:func:`_sum_tree` builds the tree for a device: :class:`_SumTree` on the CPU,
:class:`~rbdata.samplers._device_sumtree._DeviceSumTree` on any other device.
Both draw the same leaves from the same generator state.
"""

from __future__ import annotations

import numpy as np
import torch

from rbdata.samplers._device_sumtree import _FANOUT, _SHIFT, _canonical, _DeviceSumTree

_AT = {"amax": np.maximum, "amin": np.minimum}


def _sum_tree(
    capacity: int,
    dtype: torch.dtype = torch.float,
    track_max: bool = False,
    device: torch.device | str | None = None,
) -> _DeviceSumTree:
    """The fastest sum tree for ``device``: :class:`_SumTree` on the CPU, else a device tree."""
    device = _canonical(device)
    if device.type == "cpu":
        return _SumTree(capacity, dtype, track_max)
    return _DeviceSumTree(capacity, dtype, track_max, device)


def _tree_on(tree: _DeviceSumTree, device: torch.device | str) -> _DeviceSumTree:
    """``tree`` if it lives on ``device``, else a tree there holding the same leaves."""
    device = _canonical(device)
    if tree.device == device:
        return tree
    moved = _sum_tree(tree.capacity, tree.dtype, tree.tracks_max, device)
    moved.set_leaves(tree.leaves.to(device))
    return moved


class _SumTree(_DeviceSumTree):
    """The CPU sum tree: :class:`_DeviceSumTree` with numpy fast paths and a lazy minimum.

    The per-batch bookkeeping on a few hundred entries (gathers, scatters,
    arithmetic) goes through numpy views of the levels, which costs a
    fraction of a torch call each, while the row reductions, cumulative sums
    and batched searches stay in torch. Draws follow the same arithmetic as
    the device tree, so both return the same leaves for the same generator
    state (for sums that round alike).

    The minimum ignores zero leaves (they are never sampled): :attr:`min` is
    the smallest positive leaf (``inf`` when none is positive). It is kept
    with the leaf that holds it: an update only compares its new values with
    it, unless it overwrites that leaf, in which case the minimum is
    recomputed when next asked for, from the parents' minima (``_min``, one
    level per parent level) refreshed for the parents written since the last
    recomputation (``_dirty``). So an update costs no minimum maintenance,
    and a recomputation costs what the updates since the last one skipped.

    Args:
        capacity: number of leaves.
        dtype: floating dtype of the stored values (float32 or float64; other
            floating dtypes are stored as float32).
        track_max: also maintain the maximum leaf (:attr:`max`).
    """

    def __init__(
        self, capacity: int, dtype: torch.dtype = torch.float, track_max: bool = False
    ) -> None:
        super().__init__(capacity, dtype, track_max, "cpu")
        self._view_tensors()
        self._dirty = np.zeros(self._sum[-2].numel() if len(self._sum) > 1 else 0, dtype=bool)
        self._min_value: float | None = float("inf")  # None: to recompute
        self._argmin = -1  # a leaf holding the minimum (-1: none is positive)
        self._ones = np.ones(_FANOUT, dtype=self._s[0].dtype)  # row sums as one BLAS call
        self._float = self._s[0].dtype.type
        self._strata_np = np.zeros(0, dtype=self._s[0].dtype)

    _VIEWS = (*_DeviceSumTree._VIEWS, "_s", "_m", "_x", "_p", "_search_np")

    def _make_views(self) -> None:
        super()._make_views()
        self._view_tensors()

    def _view_tensors(self) -> None:
        """The numpy views sharing the tensors' memory."""
        self._s = [t.numpy() for t in self._sum]
        self._m = [t.numpy() for t in self._min]
        self._x = [t.numpy() for t in self._max] if self._max is not None else None
        self._p = self._prefix.numpy()
        self._search_np = self._p[1:-1]

    # ------------------------------------------------------------ summaries
    @property
    def total(self) -> float:
        """Sum of all leaves."""
        self._top_prefix()
        return float(self._p[-1])

    @property
    def min(self) -> float:
        """Smallest positive leaf (``inf`` when no leaf is positive)."""
        if self._min_value is None:
            self._min_value = self._recompute_min()
        return self._min_value

    @property
    def min_tensor(self) -> torch.Tensor:
        """Smallest positive leaf (``inf`` when none is), a 0-d tensor."""
        return torch.tensor(self.min, dtype=self.dtype)

    @staticmethod
    def _rows_min(rows: np.ndarray) -> np.ndarray:
        return torch.from_numpy(rows).amin(1).numpy()

    def _recompute_min(self) -> float:
        """Refresh the parents' minima written since the last time; return the minimum."""
        leaves = self._s[-1]
        if not self._m:  # a flat tree: the leaves are the top
            positive = np.where(leaves > 0, leaves, np.inf)
        else:
            dirty = np.flatnonzero(self._dirty)
            self._dirty[dirty] = False
            rows = leaves.reshape(-1, _FANOUT).take(dirty, axis=0)
            rows[rows == 0] = np.inf
            self._m[-1][dirty] = self._rows_min(rows)
            for depth in range(len(self._m) - 2, -1, -1):
                dirty = dirty >> _SHIFT
                rows = self._m[depth + 1].reshape(-1, _FANOUT).take(dirty, axis=0)
                self._m[depth][dirty] = self._rows_min(rows)
            positive = self._m[0]
        node = int(positive.argmin())
        low = float(positive[node])
        if low == float("inf"):
            self._argmin = -1
            return low
        below = (*self._m[1:], leaves) if self._m else ()
        for level in below:  # descend to a leaf holding the minimum
            row = level[node << _SHIFT : (node + 1) << _SHIFT]
            node = (node << _SHIFT) + int(np.where(row > 0, row, np.inf).argmin())
        self._argmin = node
        return low

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
        self._refresh_np(index)
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

    def _refresh_np(self, index: np.ndarray) -> None:
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
        super().set_leaves(values)  # every parent's minimum is fresh
        self._dirty[:] = False
        self._min_value = None

    # ------------------------------------------------------------ sampling
    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """Return, for each ``mass`` in ``[0, total)``, the leaf whose prefix-sum range holds it.

        See :meth:`_DeviceSumTree.find`.

        Args:
            mass: 1-D tensor of masses.
        """
        mass = torch.as_tensor(mass, dtype=self.dtype).reshape(-1)
        return torch.from_numpy(self._find(mass.numpy()))

    def _find(self, mass: np.ndarray) -> np.ndarray:
        self._top_prefix()
        prefix = self._p
        zero = self._float(0)
        mass = np.minimum(np.maximum(mass, zero), np.nextafter(prefix[-1], zero))
        node = np.searchsorted(self._search_np, mass, side="right")
        last = len(self._sum) - 1
        if last == 0:
            return node
        mass = mass - prefix.take(node)  # the mass left inside the chosen node
        for depth in range(1, last + 1):
            rows = self._s[depth].reshape(-1, _FANOUT).take(node, axis=0)
            inclusive = torch.from_numpy(rows).cumsum_(1)
            ends = inclusive.numpy()[:, -1]
            mass = np.minimum(np.maximum(mass, zero), np.nextafter(ends, zero))
            found = torch.searchsorted(inclusive, torch.from_numpy(mass[:, None]), right=True)
            child = found.numpy().reshape(-1)
            np.minimum(child, _FANOUT - 1, out=child)
            node = (node << _SHIFT) + child
            np.minimum(node, self._last_node[depth - 1], out=node)  # see _DeviceSumTree.find
            if depth < last:
                # Left of the child inside it: its inclusive sum minus its own value.
                flat = child + np.arange(0, child.size * _FANOUT, _FANOUT)
                left = inclusive.numpy().reshape(-1).take(flat) - self._s[depth].take(node)
                mass = mass - left
        return node

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
        mass += self._strata_of(k)
        mass *= self._float(total) / self._float(k)
        perm = torch.randperm(k, generator=generator).numpy()
        found, values = self._draw(mass)
        return found.take(perm), values.take(perm)

    def _draw(self, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The leaves drawn for ``mass`` (in ``[0, total]``) and their values: all positive.

        Searched by :meth:`_descend`; the draws it left on a leaf of value 0
        are searched again by :meth:`_find`.
        """
        found = self._descend(mass)
        leaves = self._s[-1]
        values = leaves.take(found, mode="clip")
        # a landing on a zero leaf, or past the last leaf (below a padding node), is searched again
        missed = (values == 0) | (found >= leaves.size)
        if missed.any():
            again = np.flatnonzero(missed)
            found[again] = self._find(mass.take(again))
            values[again] = leaves.take(found[again])
        return found, values

    def _descend(self, mass: np.ndarray) -> np.ndarray:
        """:meth:`_find` without its clamps, for masses in ``[0, total]``: the sampling path.

        Searching the inclusive sums of each row (``side="right"``) already
        skips zero leaves and puts a mass lying exactly on an edge in the leaf
        that starts there. The clamps of :meth:`_find` are for rounding across
        levels, a mass a few ulps past its row's total or below 0: here such a
        draw goes to its row's last child, or first, which leaves it on the
        leaf at that edge of the node (where :meth:`_find` may take the
        neighbour on the other side of the edge) or on a leaf of value 0 (a
        zero leaf, or padding past ``capacity``, which stays 0). The caller
        gathers the values anyway and searches those again. A row past the
        last one (below a padding node) is read as the last one
        (``mode="clip"``); so are the leaves: read them with ``mode="clip"``.
        """
        self._top_prefix()
        prefix = self._p
        node = np.searchsorted(self._search_np, mass, side="right")  # in [0, top)
        last = len(self._sum) - 1
        if last == 0:
            return node
        mass = mass - prefix.take(node)
        for depth in range(1, last + 1):
            rows = self._s[depth].reshape(-1, _FANOUT).take(node, axis=0, mode="clip")
            inclusive = torch.from_numpy(rows).cumsum_(1)
            found = torch.searchsorted(inclusive, torch.from_numpy(mass[:, None]), right=True)
            child = found.numpy().reshape(-1)
            np.minimum(child, _FANOUT - 1, out=child)  # past the row's total: its last child
            node = (node << _SHIFT) + child
            if depth < last:
                flat = child + np.arange(0, child.size * _FANOUT, _FANOUT)
                left = inclusive.numpy().reshape(-1).take(flat)
                mass = mass - (left - self._s[depth].take(node, mode="clip"))
        return node

    def _strata_of(self, k: int) -> np.ndarray:
        """``0, 1, ..., k - 1`` in the tree's dtype (cached for the last ``k``)."""
        if self._strata_np.size != k:
            self._strata_np = np.arange(k, dtype=self._s[0].dtype)
        return self._strata_np
