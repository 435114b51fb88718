"""How a PrioritizedSampler merges the priorities one update gives a repeated slot.

``reduction`` names the merge: ``"max"``, ``"min"``, ``"sum"``, ``"mean"`` or
``"median"`` (the lower median, as ``torch.median``). ``"max"`` and ``"min"``
commute with the increasing ``(p + eps) ** alpha``: the tree's leaves merge
repeated slots themselves (:data:`LEAF_REDUCTIONS`), no ``torch.unique`` needed;
the others go through :func:`merge_duplicates` first.
"""

from __future__ import annotations

import torch

#: ``reduction`` -> the name of its ``scatter_reduce`` (``"median"`` is done apart)
REDUCTIONS = {"max": "amax", "min": "amin", "sum": "sum", "mean": "mean", "median": "median"}
#: the reductions the tree's leaves apply themselves
LEAF_REDUCTIONS = {"max": "amax", "min": "amin"}


def check_reduction(reduction: str) -> str:
    """``reduction`` if it names a merge.

    Raises:
        ValueError: for any other value.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {sorted(REDUCTIONS)}, got {reduction!r}.")
    return reduction


def merge_duplicates(
    index: torch.Tensor, priority: torch.Tensor, reduction: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """One priority per slot: those of a repeated slot in ``index`` merged with ``reduction``.

    Examples:
        >>> import torch
        >>> index, priority = torch.tensor([2, 0, 2]), torch.tensor([1.0, 5.0, 3.0])
        >>> [t.tolist() for t in merge_duplicates(index, priority, "sum")]
        [[0, 2], [5.0, 4.0]]
        >>> [t.tolist() for t in merge_duplicates(index, priority, "median")]
        [[0, 2], [5.0, 1.0]]
    """
    uniq, inverse = torch.unique(index, return_inverse=True)
    if uniq.numel() == index.numel():
        return index, priority
    if reduction == "median":  # the lower median of each slot's values, as torch's
        by_value = torch.argsort(priority, stable=True)
        order = by_value[torch.argsort(inverse[by_value], stable=True)]
        counts = torch.bincount(inverse, minlength=uniq.numel())
        starts = torch.cumsum(counts, 0) - counts
        return uniq, priority[order[starts + (counts - 1) // 2]]
    merged = torch.zeros(uniq.numel(), dtype=priority.dtype, device=priority.device)
    return uniq, merged.scatter_reduce_(
        0, inverse, priority, REDUCTIONS[reduction], include_self=False
    )
