"""TensorDicts built without validation: the one place that relies on tensordict's internals.

A sampled batch of a TensorDict storage is a new TensorDict per batch (and one
per nested TensorDict, such as ``"next"``), built from leaves the storage
already checked: every leaf has the batch shape and lives on one device. The
public constructor validates all of that again (1.4 us a TensorDict), and
``TensorDict._new_unsafe`` (private) still normalizes the device and checks
for MPS and compilation (0.50 us). :func:`new_td` sets the four instance
attributes ``_new_unsafe`` sets on a fresh instance instead (0.15 us; one
thread, tensordict 0.15.3, a 2-core x86 host): with the root and ``"next"``,
0.7 us of the 2.8 us a batch of transitions spent in assembly.

It does so only where it makes exactly what ``_new_unsafe`` makes: the module
checks, when imported, that a TensorDict ``_new_unsafe`` builds holds those
four attributes and nothing else, its entries in a plain ``dict``; with
another tensordict layout, or while ``torch.compile`` traces, it calls
``_new_unsafe``.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

__all__ = ["new_td"]

_new_unsafe = TensorDict._new_unsafe
_new = TensorDict.__new__
_is_compiling = torch.compiler.is_compiling
_FIELDS = ("_batch_size", "_device", "_td_dim_names", "_tensordict")


def _slow(source: dict[Any, Any], batch_size: torch.Size, device: torch.device | None) -> Any:
    return _new_unsafe(source, batch_size=batch_size, device=device, nested=False)


def _fast(source: dict[Any, Any], batch_size: torch.Size, device: torch.device | None) -> Any:
    """What ``TensorDict._new_unsafe(source, batch_size, device, nested=False)`` makes.

    Examples:
        >>> import torch
        >>> td = _fast({"a": torch.zeros(3, 2)}, torch.Size([3]), None)
        >>> td.batch_size, td["a"].shape
        (torch.Size([3]), torch.Size([3, 2]))
    """
    if _is_compiling():
        return _slow(source, batch_size, device)
    td = _new(TensorDict)
    td._device = device
    td._tensordict = source
    td._batch_size = batch_size
    td._td_dim_names = None
    return td


def _same_layout() -> bool:
    """Whether :func:`_fast` makes what ``_new_unsafe`` makes (checked once, on import)."""
    batch, device = torch.Size([2]), torch.device("cpu")
    slow = _slow({"x": torch.zeros(2)}, batch, device)
    fast = _fast({"x": slow.get("x")}, batch, device)
    state = vars(slow)
    return (
        tuple(sorted(state)) == _FIELDS
        and type(state["_tensordict"]) is dict
        and state == vars(fast)
    )


#: ``new_td(source, batch_size, device)``: a TensorDict of ``source`` (taken as is, not
#: copied: tensors of shape ``[*batch_size, ...]`` on ``device``, a ``torch.device`` or None,
#: or nested TensorDicts built the same way), trusted to fit ``batch_size`` (a ``torch.Size``)
new_td = _fast if _same_layout() else _slow
