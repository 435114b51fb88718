"""A wide sum tree in pure torch ops, on any device (CUDA included, no host round trip)."""

from __future__ import annotations

from typing import Any

import torch

_SHIFT = 5
_FANOUT = 1 << _SHIFT
_MAX_TOP = 32768
# Stored dtypes; any other floating dtype is stored as float32 (a float16 prefix sum over a
# large tree cannot resolve single leaves, and numpy has no bfloat16 view).
_STORED_FLOATS = (torch.float32, torch.float64)


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


def _canonical(device: torch.device | str | None) -> torch.device:
    """``device`` with its index filled in (``"cuda"`` and ``"cuda:0"`` are one device)."""
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class _DeviceSumTree:
    """Sums and the positive minimum (optionally the maximum) of non-negative leaves.

    Level ``d`` holds node values ``_sum[d]``; node ``i`` of level ``d`` has
    children ``32*i .. 32*i + 31`` in level ``d+1``, so
    ``_sum[d+1].view(-1, 32)[i]`` are its children. The top level is not
    reduced to a single root: it is kept flat (at most ``_MAX_TOP`` nodes) and
    searched through its prefix sums, which costs less than the extra descent
    steps it replaces. At 1M leaves there are two levels: 31,250 top nodes
    over 1M leaves.

    Every level lives on ``device`` and every operation is a torch op on it:
    an update writes the leaves, then recomputes each affected parent sum,
    positive minimum (``_min``, zero leaves ignored) and maximum from its
    children (no incremental drift); sampling descends every draw at once,
    one level per step. Nothing is read back to the host except by the
    float properties (:attr:`total`, :attr:`min`, :attr:`max`): on CUDA use
    their ``*_tensor`` forms, 0-d tensors on the device, to stay
    asynchronous. The prefix sums of the top level are computed once after a
    change and reused until the next one.

    Draws never land on a zero leaf: at each level the mass is clamped into
    ``[0, total of the node)``, so rounding cannot push it past the last
    positive child.

    Args:
        capacity: number of leaves.
        dtype: floating dtype of the stored values (float32 or float64; other
            floating dtypes are stored as float32).
        track_max: also maintain the maximum leaf (:attr:`max`).
        device: where the tree lives (None: the CPU).
    """

    def __init__(
        self,
        capacity: int,
        dtype: torch.dtype = torch.float,
        track_max: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}.")
        if not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating dtype, got {dtype}.")
        self.capacity = capacity
        self.dtype = dtype if dtype in _STORED_FLOATS else torch.float32
        self.device = _canonical(device)
        sizes = _level_sizes(capacity)
        dtype, device = self.dtype, self.device
        self._sum = [torch.zeros(s, dtype=dtype, device=device) for s in sizes]
        # Parent levels only: a leaf's own value is its minimum and maximum.
        inf = float("inf")
        self._min = [torch.full((s,), inf, dtype=dtype, device=device) for s in sizes[:-1]]
        self._max = (
            [torch.zeros(s, dtype=dtype, device=device) for s in sizes[:-1]] if track_max else None
        )
        self._leaves = self._sum[-1][:capacity]
        # The last real (not padding) node of each level, below the top.
        self._last_node = [s // _FANOUT - 1 for s in sizes[2:]] + [capacity - 1]
        # Exclusive prefix sums of the top level, prefix[i] = sum(top[:i]) (length top + 1),
        # recomputed lazily after a change. Searching the inclusive sums but the last one
        # (``_search``) lands in [0, top) without a clamp.
        self._prefix = torch.zeros(sizes[0] + 1, dtype=dtype, device=device)
        self._inclusive = self._prefix[1:]
        self._search = self._prefix[1:-1]
        self._prefix_ok = True
        self._zero = torch.zeros((), dtype=dtype, device=device)
        self._inf = torch.full((), inf, dtype=dtype, device=device)
        self._strata_k = torch.zeros(0, dtype=dtype, device=device)

    #: attributes that are views of others: pickled tensors lose their sharing, so
    #: they are left out of the pickle and made again from what they view
    _VIEWS: tuple[str, ...] = ("_leaves", "_inclusive", "_search")

    def _make_views(self) -> None:
        self._leaves = self._sum[-1][: self.capacity]
        self._inclusive = self._prefix[1:]
        self._search = self._prefix[1:-1]

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._VIEWS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._make_views()

    # ------------------------------------------------------------ summaries
    @property
    def tracks_max(self) -> bool:
        """Whether the tree also maintains its largest leaf (``track_max=True``)."""
        return self._max is not None

    @property
    def leaves(self) -> torch.Tensor:
        """The leaf values (a view; change them with :meth:`update`)."""
        return self._leaves

    def _top_prefix(self) -> torch.Tensor:
        """The exclusive prefix sums of the top level (cached until the next change)."""
        if not self._prefix_ok:
            torch.cumsum(self._sum[0], 0, out=self._inclusive)
            self._prefix_ok = True
        return self._prefix

    @property
    def total_tensor(self) -> torch.Tensor:
        """Sum of all leaves, a 0-d tensor on the tree's device."""
        return self._top_prefix()[-1].clone()

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._top_prefix()[-1])

    @property
    def min_tensor(self) -> torch.Tensor:
        """Smallest positive leaf (``inf`` when none is), a 0-d tensor on the tree's device."""
        if self._min:
            return self._min[0].amin()
        return torch.where(self._leaves > 0, self._leaves, self._inf).amin()

    @property
    def min(self) -> float:
        """Smallest positive leaf (``inf`` when no leaf is positive)."""
        return float(self.min_tensor)

    @property
    def max_tensor(self) -> torch.Tensor:
        """Largest leaf (needs ``track_max=True``), a 0-d tensor on the tree's device."""
        if self._max is None:
            raise RuntimeError("this tree was built with track_max=False.")
        return (self._max[0] if self._max else self._sum[0]).amax()

    @property
    def max(self) -> float:
        """Largest leaf (needs ``track_max=True``)."""
        return float(self.max_tensor)

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        return self._leaves[index]

    def query(self, start: int, end: int) -> float:
        """The sum of leaves ``start .. end - 1`` (torchrl's segment-tree ``query``)."""
        return float(self._leaves[max(start, 0) : min(end, self.capacity)].sum())

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
            positive: the caller knows every value is > 0 (a hint: trees that
                mask zero leaves per update skip it; this one masks per row).
        """
        index = index.reshape(-1).to(self.device)
        if not index.numel():
            return
        values = torch.as_tensor(values).to(device=self.device, dtype=self.dtype).reshape(-1)
        if reduce is None:
            self._sum[-1].index_copy_(0, index, values)
        else:
            self._sum[-1].scatter_reduce_(0, index, values, reduce, include_self=False)
        self._refresh(index)

    def _refresh(self, index: torch.Tensor) -> None:
        """Recompute the sums, minima (and maxima) above the leaves ``index``."""
        self._prefix_ok = False
        last = len(self._sum) - 1
        node = index
        for depth in range(last - 1, -1, -1):
            node = node >> _SHIFT
            rows = self._sum[depth + 1].view(-1, _FANOUT).index_select(0, node)
            # duplicate nodes write the same value: their rows were read after every write
            self._sum[depth].index_copy_(0, node, rows.sum(1))
            if depth + 1 == last:
                low, high = torch.where(rows > 0, rows, self._inf), rows
            else:
                low = self._min[depth + 1].view(-1, _FANOUT).index_select(0, node)
                if self._max is not None:
                    high = self._max[depth + 1].view(-1, _FANOUT).index_select(0, node)
            self._min[depth].index_copy_(0, node, low.amin(1))
            if self._max is not None:
                self._max[depth].index_copy_(0, node, high.amax(1))

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace every leaf with ``values`` (length ``capacity``) and rebuild the tree."""
        self._prefix_ok = False
        self._sum[-1].zero_()
        self._leaves.copy_(values.to(device=self.device, dtype=self.dtype))
        last = len(self._sum) - 1
        for depth in range(last - 1, -1, -1):
            kids = self._sum[depth + 1].view(-1, _FANOUT)
            m = kids.shape[0]
            self._sum[depth][:m] = kids.sum(1)
            if depth + 1 == last:
                low, high = torch.where(kids > 0, kids, self._inf), kids
            else:
                low = self._min[depth + 1].view(-1, _FANOUT)
                if self._max is not None:
                    high = self._max[depth + 1].view(-1, _FANOUT)
            self._min[depth][:m] = low.amin(1)
            if self._max is not None:
                self._max[depth][:m] = high.amax(1)

    # ------------------------------------------------------------ sampling
    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """Return, for each ``mass`` in ``[0, total)``, the leaf whose prefix-sum range holds it.

        Leaf ``i`` is returned when ``sum(leaves[:i]) <= mass < sum(leaves[:i+1])``,
        so zero leaves are skipped: a mass is clamped into its node's range
        at every level (a mass at or past ``total`` lands on the last
        positive leaf). With every leaf 0, the leaves returned are arbitrary.

        Args:
            mass: 1-D tensor of masses.
        """
        mass = torch.as_tensor(mass).to(device=self.device, dtype=self.dtype).reshape(-1)
        prefix = self._top_prefix()
        below = torch.nextafter(prefix[-1], self._zero)
        mass = torch.clamp(mass, min=self._zero, max=below)
        node = torch.searchsorted(self._search, mass, right=True)
        last = len(self._sum) - 1
        if last == 0:
            return node
        mass = mass - prefix.index_select(0, node)  # the mass left inside the chosen node
        for depth in range(1, last + 1):
            rows = self._sum[depth].view(-1, _FANOUT).index_select(0, node)
            inclusive = rows.cumsum(1)
            below = torch.nextafter(inclusive[:, -1], self._zero)
            mass = torch.clamp(mass, min=self._zero, max=below)
            child = torch.searchsorted(inclusive, mass.unsqueeze(1), right=True).squeeze(1)
            # The clamps only bind on an all-zero row (every leaf 0): they keep the draw on a
            # real node, so the gathers below stay in range.
            child = child.clamp_(max=_FANOUT - 1)
            node = ((node << _SHIFT) + child).clamp_(max=self._last_node[depth - 1])
            if depth < last:
                # Left of the child inside it: its inclusive sum minus its own value.
                left = (inclusive - rows).gather(1, child.unsqueeze(1)).squeeze(1)
                mass = mass - left
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
        not sorted by slot. ``generator`` must live on the tree's device.

        Returns:
            ``(index, values)``: the leaves drawn and their values, on the tree's device.

        Raises:
            RuntimeError: when every leaf is 0, on the CPU (elsewhere that check
                would wait for the device: the caller checks :attr:`total`, and
                draws from an all-zero tree are arbitrary leaves of value 0).
        """
        total = self._top_prefix()[-1]
        if self.device.type == "cpu" and not float(total) > 0:
            raise RuntimeError("cannot sample: every priority is 0 (nothing is sampleable).")
        mass = torch.rand(k, generator=generator, dtype=self.dtype, device=self.device)
        mass += self._strata(k)
        mass *= total / k
        perm = torch.randperm(k, generator=generator, device=self.device)
        index = self.find(mass).index_select(0, perm)
        return index, self._leaves.index_select(0, index)

    def _strata(self, k: int) -> torch.Tensor:
        """``0, 1, ..., k - 1`` in the tree's dtype (cached for the last ``k``)."""
        if self._strata_k.numel() != k:
            self._strata_k = torch.arange(k, dtype=self.dtype, device=self.device)
        return self._strata_k
