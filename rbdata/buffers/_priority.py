"""The checks of a priority update, done before any priority changes."""

from __future__ import annotations

import numpy as np
import torch

from rbdata._component.checks import check_indices

_NUMPY_FLOATS = (torch.float32, torch.float64)

__all__ = ["check_priority_update", "check_priorities"]


def check_priorities(priority: torch.Tensor | float, name: str = "priority") -> torch.Tensor:
    """``priority`` as a detached 1-D floating tensor of finite values >= 0.

    Raises:
        ValueError: if a value is negative, NaN or infinite.
    """
    priority = torch.as_tensor(priority).detach()
    if not priority.is_floating_point():
        priority = priority.double()
    if priority.ndim != 1:
        priority = priority.reshape(-1)
    if priority.numel():
        if priority.is_cpu and priority.dtype in _NUMPY_FLOATS:  # two numpy reductions
            values = priority.numpy()
            low, high = float(np.minimum.reduce(values)), float(np.maximum.reduce(values))
        else:
            low, high = (float(v) for v in torch.stack(torch.aminmax(priority)).tolist())
        if not (low >= 0 and high < float("inf")):  # NaN fails both
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

    An index on a device (a CUDA buffer's sampled ``info["index"]``) stays
    there, with the priorities moved to it: see :func:`_check_on_device`.

    Raises:
        TypeError: for an index that does not hold integers.
        ValueError: for a slot outside the written ones, a priority that is negative,
            NaN or infinite, or lengths that differ.
    """
    if isinstance(index, torch.Tensor) and not index.is_cpu:
        return _check_on_device(index, priority, written)
    index = check_indices(index, written)
    priority = check_priorities(priority)
    return index, _one_per_index(priority, index)


def _one_per_index(priority: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``priority`` with one entry per index (a single value is broadcast)."""
    if priority.numel() == 1 and index.numel() != 1:
        return priority.expand(index.numel())
    if priority.numel() != index.numel():
        raise ValueError(
            f"priority has {priority.numel()} entries, expected one per index ({index.numel()})."
        )
    return priority


def _check_on_device(
    index: torch.Tensor, priority: torch.Tensor | float, written: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`check_priority_update` for an index on a device, keeping both tensors there.

    The bounds of the slots and of the priorities come back in one fused read
    (one sync: a bad update must raise before anything changes); the errors are
    those of the CPU checks.
    """
    if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        raise TypeError(
            f"index must hold integers, got dtype {index.dtype} (a bool mask or float "
            "positions are not slots)."
        )
    index = index.to(torch.long).reshape(-1)
    priority = torch.as_tensor(priority, device=index.device).detach()
    if not priority.is_floating_point():
        priority = priority.double()
    priority = priority.reshape(-1)
    checked = [t for t in (index, priority) if t.numel()]
    bounds = [v.double() for t in checked for v in torch.aminmax(t)]
    read = torch.stack(bounds).tolist() if bounds else []  # the one sync
    if index.numel():
        low_slot, high_slot = read[0], read[1]
        if low_slot < 0 or high_slot >= written:
            bad = int(low_slot if low_slot < 0 else high_slot)
            raise ValueError(
                f"index holds slot {bad}, outside the {written} written slot(s) [0, {written})."
            )
    if priority.numel():
        low, high = read[-2], read[-1]
        if not (low >= 0 and high < float("inf")):  # NaN fails both
            bad_values = priority[~torch.isfinite(priority) | (priority < 0)][:5].tolist()
            raise ValueError(f"priority values must be finite and >= 0, got {bad_values}.")
    return index, _one_per_index(priority, index)
