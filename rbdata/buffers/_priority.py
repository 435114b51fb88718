"""The checks of a priority update, done before any priority changes."""

from __future__ import annotations

import torch

from rbdata._validation import check_indices

__all__ = ["check_priority_update", "check_priorities"]


def check_priorities(priority: torch.Tensor | float, name: str = "priority") -> torch.Tensor:
    """``priority`` as a detached 1-D floating tensor of finite values >= 0.

    Raises:
        ValueError: if a value is negative, NaN or infinite.
    """
    priority = torch.as_tensor(priority).detach()
    if not priority.is_floating_point():
        priority = priority.double()
    priority = priority.reshape(-1)
    if priority.numel():
        low, high = torch.aminmax(priority)
        if not (low.item() >= 0 and high.item() < float("inf")):  # NaN fails both
            bad = priority[~torch.isfinite(priority) | (priority < 0)][:5].tolist()
            raise ValueError(f"{name} values must be finite and >= 0, got {bad}.")
    return priority


def check_priority_update(
    index: torch.Tensor | int, priority: torch.Tensor | float, written: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``index`` and ``priority`` as 1-D tensors of one length (a scalar priority expanded).

    Args:
        index: the slots (an int or an integer tensor).
        priority: one value per slot, or one for all.
        written: the number of written slots (valid slots are ``[0, written)``).

    Raises:
        TypeError: for an index that does not hold integers.
        ValueError: for a slot outside the written ones, a priority that is negative,
            NaN or infinite, or lengths that differ.
    """
    index = check_indices(index, written)
    priority = check_priorities(priority)
    if priority.numel() == 1 and index.numel() != 1:
        priority = priority.expand(index.numel())
    if priority.numel() != index.numel():
        raise ValueError(
            f"priority has {priority.numel()} entries, expected one per index ({index.numel()})."
        )
    return index, priority
