"""The one validation of a priority update: slots and priorities aligned, their bounds checked.

:func:`priority_arguments` brings what a caller passed to two 1-D tensors of
one length; :func:`check_update` aligns them with the tree (device, dtype)
and checks them with the bounds it reads once (numpy reductions on the CPU,
one fused device read elsewhere). The resulting :class:`CheckedUpdate`
carries those bounds, so that storing the update reads nothing again.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from rbdata.samplers._priority_store import priority_bounds, update_bounds


class CheckedUpdate(NamedTuple):
    """A validated update: slots and priorities on one device, the priorities' bounds."""

    slots: torch.Tensor
    priority: torch.Tensor
    low: float
    high: float


def _describe_bad(values: torch.Tensor, bad: torch.Tensor, limit: int = 5) -> str:
    where = bad.nonzero().reshape(-1)[:limit]
    return ", ".join(f"[{int(i)}]={values[i].item()}" for i in where)


def check_values(priority: torch.Tensor, low: float, high: float) -> None:
    """ValueError unless ``priority`` (bounds ``low``, ``high``) is finite and >= 0."""
    if not (low >= 0 and high < float("inf")):  # NaN fails both comparisons
        bad = ~torch.isfinite(priority) | (priority < 0)
        raise ValueError(f"priority must be finite and >= 0, got {_describe_bad(priority, bad)}.")


def check_slots(index: torch.Tensor, top: int, bound: int) -> None:
    """ValueError unless ``index`` (its :func:`index_top` is ``top``) lies in ``[0, bound)``."""
    if top >= bound:
        bad = (index < 0) | (index >= bound)
        raise ValueError(
            f"index must lie in [0, {bound}), got out-of-range entries {_describe_bad(index, bad)}."
        )


def priority_arguments(
    index: int | torch.Tensor,
    priority: float | torch.Tensor,
    non_integer: type[Exception] = ValueError,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``index`` and ``priority`` as 1-D tensors of one length (a single priority broadcast).

    Args:
        index: an int or an integer tensor of slots.
        priority: one value per slot, or one for all.
        non_integer: the error raised for an index that does not hold integers
            (the sampler's own method raises ValueError, as torchrl's; a buffer TypeError).

    Raises:
        ValueError: if the lengths differ.
    """
    index = torch.as_tensor(index)
    if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        raise non_integer(f"index must hold integers, got dtype {index.dtype}.")
    priority = torch.as_tensor(priority).detach()
    n = index.numel()
    if priority.numel() == 1 and n != 1:
        priority = priority.reshape(()).expand(n)
    elif priority.numel() != n:
        raise ValueError(
            f"priority has shape {tuple(priority.shape)} but index has shape "
            f"{tuple(index.shape)}: expected one priority per index, or a scalar."
        )
    return index.reshape(-1), priority.reshape(-1)


def aligned(
    index: torch.Tensor, priority: torch.Tensor, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """1-D int64 slots and priorities of ``dtype`` on one device.

    They stay where they are when both are on one device (checked there,
    then moved once); else both go to ``device`` (the tree's). The dtype
    conversion comes first, so a value that overflows ``dtype`` is caught as
    infinite.
    """
    where = index.device if index.device == priority.device else device
    if index.device != where or index.dtype != torch.long:
        index = index.to(device=where, dtype=torch.long)
    if priority.device != where or priority.dtype != dtype:
        priority = priority.to(device=where, dtype=dtype)
    return index, priority


def check_update(
    index: torch.Tensor,
    priority: torch.Tensor,
    bound: int,
    device: torch.device,
    dtype: torch.dtype,
    values_first: bool = True,
) -> CheckedUpdate:
    """Align a non-empty update with the tree and check it once (ValueError; nothing changes).

    Args:
        index: 1-D integer slots, which must lie in ``[0, bound)``.
        priority: 1-D priorities, one per slot (finite, >= 0 in ``dtype``).
        bound: the number of valid slots.
        device: the tree's device.
        dtype: the tree's dtype.
        values_first: which check reports first when both fail.
    """
    index, priority = aligned(index, priority, device, dtype)
    top, low, high = update_bounds(index, priority)
    if values_first:
        check_values(priority, low, high)
        check_slots(index, top, bound)
    else:
        check_slots(index, top, bound)
        check_values(priority, low, high)
    return CheckedUpdate(index, priority, low, high)


def checked_leaves(
    leaves: Any, capacities: tuple[int, int], dtype: torch.dtype
) -> torch.Tensor | None:
    """A saved tree's leaves as ``dtype`` values, checked (shape, finite, >= 0); None if absent.

    Args:
        leaves: the saved leaves.
        capacities: ``(max_capacity, cell_capacity)``: the leaves a tree holds
            before and after it grew past ``max_capacity``.
        dtype: the tree's dtype.

    Raises:
        ValueError: for leaves of another shape than ``(max_capacity,)`` or
            ``(cell_capacity,)``, or bad priorities.
    """
    if leaves is None:
        return None
    if tuple(leaves.shape) not in {(capacities[0],), (capacities[1],)}:
        raise ValueError(
            f"state_dict['leaves'] has shape {tuple(leaves.shape)}, expected "
            f"({capacities[0]},) (max_capacity) or ({capacities[1]},) (the cells the "
            "sampler's tree grows to)."
        )
    values = torch.as_tensor(leaves).to(dtype).reshape(-1)
    if values.numel():
        check_values(values, *priority_bounds(values))  # finite and >= 0
    return values
