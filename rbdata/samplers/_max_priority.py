"""The largest priority a PrioritizedSampler was given: what its new items get.

torchrl keeps ``_max_priority = (raw max, its slot)``. rbdata keeps three
numbers: the largest raw priority (which the tree cannot give back when
``alpha = 0``), its transformed value ``(raw + eps) ** alpha`` (what the tree
gets for a new item) and the slot where the largest raw priority was first
written. :class:`MaxPriority` is that bookkeeping: it follows the writes, the
updates, a change of ``alpha``, ``empty`` and a ``state_dict`` round trip.
With ``max_priority_within_buffer`` the sampler reads the maximum off the tree
instead, and only the raw value and the slot are kept here.
"""

from __future__ import annotations

from typing import Any

import torch


class MaxPriority:
    """The largest priority seen by a sampler: raw, transformed, and where it was first written.

    Args:
        alpha: the sampler's priority exponent.
        eps: what the sampler adds to every priority before the power.

    Examples:
        >>> import torch
        >>> top = MaxPriority(alpha=1.0, eps=0.0)
        >>> top.seen, top.raw, top.index  # before any update, new items get 1.0
        (1.0, 1.0, None)
        >>> top.updated(torch.tensor([3, 5]), torch.tensor([2.0, 4.0]), 4.0)
        >>> top.stored(4.0)
        >>> top.seen, top.raw, top.index
        (4.0, 4.0, 5)
        >>> top.rescale(old=1.0, new=0.5, eps=0.0)  # alpha 1 -> 0.5: 4.0 ** 0.5
        >>> top.seen
        2.0
    """

    def __init__(self, alpha: float, eps: float) -> None:
        self.initial: float = (1.0 + eps) ** alpha  # what new items get before any update
        self.seen: float = self.initial  # the largest transformed value stored
        self.raw: float = 1.0  # the largest raw priority written (alpha = 0 cannot recover it)
        self.index: int | None = None  # where ``raw`` was first written

    def reset(self) -> None:
        """Forget every priority (the sampler was emptied)."""
        self.seen, self.raw, self.index = self.initial, 1.0, None

    def written(self, index: torch.Tensor) -> None:
        """The slots ``index`` got the default priority: the first write names the slot."""
        if self.index is None and index.numel():
            self.index = int(index[0])  # torchrl's writes set the first max: 1.0 here

    def updated(self, slots: Any, raw: Any, raw_top: float) -> None:
        """The raw priorities ``raw`` (largest ``raw_top``) go to ``slots`` (numpy or torch)."""
        if self.index is None or raw_top > self.raw:
            self.index = int(slots[int(raw.argmax())])  # where the new largest is
        self.raw = max(self.raw, raw_top)

    def stored(self, top: float) -> None:
        """The tree got transformed values up to ``top``."""
        self.seen = max(self.seen, top)

    def rescale(self, old: float, new: float, eps: float) -> None:
        """``alpha`` changed from ``old`` to ``new``: the transformed values follow."""
        self.initial = (1.0 + eps) ** new
        if old == 0.0:  # every written leaf held 1: start again from the raw maximum
            self.seen = (self.raw + eps) ** new
        else:
            self.seen = self.seen ** (new / old)

    def state(self) -> dict[str, Any]:
        """The entries of the sampler's ``state_dict``."""
        return {
            "max_priority": self.seen,
            "max_raw_priority": self.raw,
            "max_priority_index": self.index,
        }

    def load(self, state_dict: dict[str, Any], alpha: float, eps: float) -> None:
        """Restore :meth:`state`'s entries (absent ones: kept) for the exponents loaded."""
        self.initial = (1.0 + eps) ** alpha
        self.seen = float(state_dict.get("max_priority", self.seen))
        self.raw = float(state_dict.get("max_raw_priority", self.raw))
        index = state_dict.get("max_priority_index", self.index)
        self.index = None if index is None else int(index)
