"""The plain-torch limit of prioritized replay: a 32-ary sum tree and min tree in torch ops.

What a prioritized step costs when written directly in torch, with no
validation and no buffer around it: stratified draws descending a 32-ary sum
tree (one ``cumsum`` + ``searchsorted`` per level), importance weights from a
32-ary min tree, a gather of the drawn rows, and a priority update that
rewrites the leaves and recomputes their ancestors level by level.
"""

from __future__ import annotations

import torch
from _common import ConsumeLimit
from tensordict import TensorDict

FANOUT = 32


class SumTreeLimit:
    """A 32-ary sum tree (and min tree) of ``capacity`` leaves, in plain torch.

    Args:
        capacity: number of leaves.
        alpha: priority exponent.
        beta: importance-sampling exponent.
    """

    def __init__(self, capacity: int, alpha: float, beta: float) -> None:
        sizes = [1]
        while sizes[-1] < capacity:
            sizes.append(sizes[-1] * FANOUT)
        self.sums = [torch.zeros(s) for s in sizes]  # root first
        self.mins = [torch.full((s,), float("inf")) for s in sizes]
        self.capacity, self.alpha, self.beta = capacity, alpha, beta
        self.update(torch.arange(capacity), torch.ones(capacity))

    def update(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the leaves ``index`` to ``(priority + 1e-8) ** alpha``; refresh their ancestors."""
        values = (priority + 1e-8).pow_(self.alpha)
        self.set_leaves(index, values, values)

    def set_leaves(self, index: torch.Tensor, sums: torch.Tensor, mins: torch.Tensor) -> None:
        """Set the leaves ``index`` of the sum and min trees; refresh their ancestors."""
        self.sums[-1].index_copy_(0, index, sums)
        self.mins[-1].index_copy_(0, index, mins)
        node = index
        for depth in range(len(self.sums) - 2, -1, -1):
            node = node // FANOUT
            self.sums[depth].index_copy_(
                0, node, self.sums[depth + 1].view(-1, FANOUT).index_select(0, node).sum(1)
            )
            self.mins[depth].index_copy_(
                0, node, self.mins[depth + 1].view(-1, FANOUT).index_select(0, node).amin(1)
            )

    def sample(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``k`` stratified draws proportional to the leaves, and their importance weights."""
        total = self.sums[0][0]
        mass = (torch.rand(k) + torch.arange(k)) * (total / k)
        node = torch.zeros(k, dtype=torch.long)
        for level in self.sums[1:]:
            rows = level.view(-1, FANOUT).index_select(0, node)
            inclusive = rows.cumsum(1)
            child = torch.searchsorted(inclusive, mass.unsqueeze(1), right=True).clamp_(
                max=FANOUT - 1
            )
            mass = mass - (inclusive - rows).gather(1, child).squeeze(1)
            node = node * FANOUT + child.squeeze(1)
        node = node.clamp_(max=self.capacity - 1)  # a rounding at the very end: the last leaf
        weight = (self.sums[-1].index_select(0, node) / self.mins[0][0]).pow_(-self.beta)
        return node, weight


class PrioritizedConsumeLimit(ConsumeLimit):
    """:class:`ConsumeLimit` drawing by priority: the plain-torch limit of prioritized consume-once.

    Slots are written in ring order as in :class:`ConsumeLimit`, each given
    the maximum priority (a leaf of 1 in a :class:`SumTreeLimit`); the drain
    draws ``batch`` slots at a time from the tree (with their importance
    weights), gathers the distinct ones still live and sets their leaves to 0
    (consumed; ``inf`` in the min tree), until no leaf is left.

    Args:
        capacity: rows per key.
        example: a batch whose keys, shapes and dtypes the rows take.
        batch: rows per drawn batch.
        alpha: priority exponent.
        beta: importance-sampling exponent.
    """

    def __init__(
        self, capacity: int, example: TensorDict, batch: int, alpha: float, beta: float
    ) -> None:
        super().__init__(capacity, example, batch)
        self.tree = SumTreeLimit(capacity, alpha, beta)
        every = torch.arange(capacity)
        self.tree.set_leaves(every, torch.zeros(capacity), torch.full((capacity,), float("inf")))

    def cycle(self, data: TensorDict) -> None:
        """Write ``data`` into free slots at the maximum priority, then draw them all."""
        slots = self._take(data.shape[0])
        self._write(slots, data)
        ones = torch.ones(slots.numel())
        self.tree.set_leaves(slots, ones, ones)
        live = slots.numel()
        while live:
            drawn, _ = self.tree.sample(min(self.store.batch, live))
            drawn = drawn.unique()
            drawn = drawn[~self.free[drawn]]  # a draw on a consumed leaf (rounding) is dropped
            self.store.gather(drawn)
            self._freed(drawn)
            n = drawn.numel()
            self.tree.set_leaves(drawn, torch.zeros(n), torch.full((n,), float("inf")))
            live -= drawn.numel()
