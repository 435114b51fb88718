"""Sharded indices and the arithmetic of drawing across shards (no Ray here).

A sharded buffer's index is ``shard * capacity + local``, where ``capacity``
is one shard's storage capacity: an index names the shard that owns the item,
so a priority update goes back to it. Sampling draws how many items each
shard gives from the shards' masses (multinomial, with replacement), so an
item's probability is ``mass(shard) / total * p(item | shard)`` =
``p(item) / total``: exactly what one unsharded buffer holding the same
priorities gives. Importance weights ``(p / p_min) ** -beta`` are
renormalised from the shard's smallest priority to the global one.

Examples:
    >>> import torch
    >>> from rbdata.service.sharding.routing import split_index, shard_counts
    >>> split_index(torch.tensor([3, 12, 9]), capacity=5, shards=3)
    {0: (tensor([0]), tensor([3])), 1: (tensor([2]), tensor([4])), 2: (tensor([1]), tensor([2]))}
    >>> shard_counts([0.0, 2.0, 2.0], 1000, torch.Generator().manual_seed(0)).tolist()
    [0, 500, 500]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["global_weight", "merge", "shard_counts", "split_index"]


def split_index(
    index: torch.Tensor, capacity: int, shards: int
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Group a sharded index by shard: ``{shard: (positions in index, local index)}``.

    Raises:
        ValueError: for an index outside ``[0, shards * capacity)``.
    """
    flat = index.reshape(-1).long()
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= shards * capacity):
        raise ValueError(
            f"index must lie in [0, {shards * capacity}) (shards * capacity of a shard), got "
            f"values from {int(flat.min())} to {int(flat.max())}."
        )
    owner = flat // capacity
    out: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for shard in owner.unique().tolist():
        where = (owner == shard).nonzero().reshape(-1)
        out[int(shard)] = (where, flat.index_select(0, where) - shard * capacity)
    return out


def shard_counts(
    masses: Sequence[float], batch_size: int, generator: torch.Generator
) -> torch.Tensor:
    """How many of ``batch_size`` items each shard gives, drawn in proportion to ``masses``.

    Raises:
        RuntimeError: when no shard has mass (nothing is sampleable).
    """
    weights = torch.tensor(list(masses), dtype=torch.float64)
    if not bool((weights > 0).any()):
        raise RuntimeError(
            "Cannot sample: every shard is empty or has no priority mass; write items first."
        )
    drawn = torch.multinomial(weights, batch_size, replacement=True, generator=generator)
    return torch.bincount(drawn, minlength=len(weights))


def global_weight(
    weight: torch.Tensor, local_min: float, global_min: float, beta: float
) -> torch.Tensor:
    """A shard's weights ``(p / local_min) ** -beta`` as ``(p / global_min) ** -beta``."""
    if beta == 0.0 or local_min == global_min:
        return weight
    return weight * float((global_min / local_min) ** beta)


def merge(parts: Sequence[Any], order: torch.Tensor) -> Any:
    """Concatenate the shards' batches (tensors, TensorDicts, tuples, dicts), permuted by ``order``.

    Raises:
        TypeError: for a batch of another kind.
    """
    first = parts[0]
    if isinstance(first, (torch.Tensor, TensorDictBase)):
        return torch.cat(list(parts), 0)[order]
    if isinstance(first, tuple):
        return tuple(merge([p[i] for p in parts], order) for i in range(len(first)))
    if isinstance(first, dict):
        return {key: merge([p[key] for p in parts], order) for key in first}
    raise TypeError(
        "a sharded buffer merges tensor, TensorDict, tuple or dict batches, got "
        f"{type(first).__name__}."
    )
