"""The plain-torch limit of prioritized replay: a 32-ary sum tree and min tree in torch ops.

What a prioritized step costs when written directly in torch, with no
validation and no buffer around it: stratified draws descending a 32-ary sum
tree (one ``cumsum`` + ``searchsorted`` per level), importance weights from a
32-ary min tree, a gather of the drawn rows, and a priority update that
rewrites the leaves and recomputes their ancestors level by level.
"""

from __future__ import annotations

import torch

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
        self.sums[-1].index_copy_(0, index, values)
        self.mins[-1].index_copy_(0, index, values)
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
