"""Per-record priorities of an expanded batch (a :class:`~rbdata.Sequence` one) put on anchors."""

from __future__ import annotations

import torch

from rbdata.buffers._priority import check_priorities

__all__ = ["reduce_to_anchors"]


def reduce_to_anchors(
    anchors: torch.Tensor,
    priority: torch.Tensor,
    valid: torch.Tensor | None,
    live: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The distinct anchors of a batch and the max priority over each one's valid records.

    Priorities live on anchors: a window's padded (invalid) records never
    count, and an anchor drawn twice gets one well-defined update.

    Args:
        anchors: the anchor slot of each record.
        priority: one new priority per record.
        valid: which records count (None: all).
        live: which records were not rewritten since the batch was sampled
            (None: all); an anchor with a rewritten record is not updated.

    Returns:
        ``(anchors, priorities, skipped)``: the anchors to update, their
        priorities and the number of anchors skipped for rewritten records.

    Raises:
        ValueError: if a priority is negative, NaN or infinite, or the
            lengths differ.

    Examples:
        >>> import torch
        >>> reduce_to_anchors(torch.tensor([7, 7, 7, 2]), torch.tensor([1.0, 5.0, 9.0, 2.0]),
        ...                   torch.tensor([True, True, False, True]), None)
        (tensor([2, 7]), tensor([2., 5.]), 0)
    """
    anchors = anchors.reshape(-1)
    priority = check_priorities(priority).to(anchors.device)
    if priority.numel() != anchors.numel():
        raise ValueError(
            f"priority has {priority.numel()} entries, expected one per record ({anchors.numel()})."
        )
    keep = torch.ones_like(anchors, dtype=torch.bool)
    if valid is not None:
        keep = valid.to(anchors.device, torch.bool).reshape(-1)
    skipped = 0
    if live is not None:
        stale = anchors[~live.to(anchors.device).reshape(-1)]
        if stale.numel():
            skipped = int(torch.unique(stale).numel())
            keep = keep & ~torch.isin(anchors, stale)
    unique, inverse = torch.unique(anchors[keep], return_inverse=True)
    reduced = torch.zeros(unique.shape, dtype=priority.dtype, device=priority.device)
    reduced.scatter_reduce_(0, inverse, priority[keep], reduce="amax", include_self=False)
    return unique, reduced, skipped
