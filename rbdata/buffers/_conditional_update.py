"""In-place updates of stored records: ``update_if_present`` and friends."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, check_indices, normalize_key
from rbdata.buffers._coordinates import to_flat
from rbdata.storages import Storage, TensorStorage, shape_of
from rbdata.writers import Writer

__all__ = ["ConditionalUpdateResult", "Records", "conditional_update"]


@dataclass(frozen=True)
class ConditionalUpdateResult:
    """Outcome of :meth:`ReplayBuffer.update_if_present`.

    Attributes:
        updated: bool mask aligned with the input ``index``: rows written.
        stale: bool mask: rows whose slot was rewritten or emptied since sampling.
        version_rejected: bool mask of live rows refused by the version
            comparison (None when no ``version_key`` was passed).

    Examples:
        >>> import torch
        >>> from rbdata import ConditionalUpdateResult
        >>> r = ConditionalUpdateResult(updated=torch.tensor([True, False]),
        ...                             stale=torch.tensor([False, True]))
        >>> r.updated_count, r.stale_count, r.version_rejected_count
        (1, 1, 0)
    """

    updated: torch.Tensor
    stale: torch.Tensor
    version_rejected: torch.Tensor | None = None

    @property
    def updated_count(self) -> int:
        """Number of rows written."""
        return int(self.updated.sum())

    @property
    def stale_count(self) -> int:
        """Number of rows skipped because their slot was reused."""
        return int(self.stale.sum())

    @property
    def version_rejected_count(self) -> int:
        """Number of live rows refused by the version comparison (0 without versions)."""
        return 0 if self.version_rejected is None else int(self.version_rejected.sum())


@dataclass(frozen=True)
class Records:
    """The records an ``update_if_present`` index addresses, one stored cell each.

    On a storage with ``ndim > 1`` the index holds coordinates (``[N, ndim]``
    or a tuple of tensors, as ``extend`` and ``info["index"]`` give them) or
    1-D flat cells, as ``update_priority`` takes them.

    Attributes:
        cells: the stored cell of each record (the row of its leaves).
        rows: the item (dim-0 slot) of each record, whose generation stamp it has.
        items: how many items are written (rows beyond are not live).
        reshape: whether patch entries are reshaped to one row per record
            (``ndim > 1``, as torchrl's: a ``[B, T]`` patch of ``B * T`` records).
    """

    cells: torch.Tensor
    rows: torch.Tensor
    items: int
    reshape: bool

    @staticmethod
    def of(index: Any, storage: Storage) -> Records:
        """The records of ``index`` (ValueError outside the storage, TypeError for non-integers)."""
        shape = shape_of(storage)
        lead = math.prod(shape[1:])
        if len(shape) == 1:
            cells = check_indices(index, shape[0])
        else:
            cells = check_indices(to_flat(index, shape), math.prod(shape))
        return Records(cells, cells // lead, len(storage) // lead, len(shape) > 1)

    def patch_rows(self, value: torch.Tensor, leaf: torch.Tensor, key: NestedKey) -> torch.Tensor:
        """``value`` as one row per record (ValueError if it does not hold one per record)."""
        expected = (self.cells.numel(), *leaf.shape[1:])
        if self.reshape and value.numel() == math.prod(expected):
            return value.reshape(expected)
        if tuple(value.shape) != expected:
            raise ValueError(f"patch[{key!r}] has shape {tuple(value.shape)}, expected {expected}.")
        return value


def _last_occurrence(index: torch.Tensor) -> torch.Tensor:
    """Mask of the rows that are the last occurrence of their slot."""
    n = index.numel()
    order = torch.arange(n)
    last = torch.full((int(index.max()) + 1,), -1, dtype=torch.long)
    last.scatter_reduce_(0, index, order, reduce="amax")
    return last[index] == order


def _winners_by_version(index: torch.Tensor, version: torch.Tensor) -> torch.Tensor:
    """Mask of rows carrying the highest version for their slot (the last one on ties)."""
    n = index.numel()
    # Sort by (slot, version, row) and keep the last row of each slot.
    order = torch.arange(n)
    key = torch.stack([index, version.to(torch.long), order], 0)
    perm = torch.from_numpy(np.lexsort(key.flip(0).numpy()))
    sorted_slots = index[perm]
    is_last = torch.ones(n, dtype=torch.bool)
    is_last[:-1] = sorted_slots[1:] != sorted_slots[:-1]
    winners = torch.zeros(n, dtype=torch.bool)
    winners[perm[is_last]] = True
    return winners


def conditional_update(
    storage: Storage,
    writer: Writer,
    *,
    index: torch.Tensor,
    generation: torch.Tensor,
    patch: Mapping[NestedKey, torch.Tensor] | TensorDictBase,
    version_key: NestedKey | None,
    version: int | torch.Tensor | None,
    require_newer: bool,
) -> ConditionalUpdateResult:
    """Validate everything, then patch the live records (see ``ReplayBuffer.update_if_present``)."""
    if not isinstance(storage, TensorStorage):
        raise RuntimeError(
            f"{type(storage).__name__} does not support conditional updates; use a tensor "
            "storage (LazyTensorStorage, LazyMemmapStorage, TensorStorage)."
        )
    if not writer.tracks_generations:
        raise RuntimeError(
            "update_if_present is a conditional update: it needs a writer that tracks slot "
            "generations, e.g. "
            "RoundRobinWriter(track_generations=True)."
        )
    if (version_key is None) != (version is None):
        raise ValueError(
            "version_key and version must be passed together, got "
            f"version_key={version_key!r} and version={version!r}."
        )
    records = Records.of(index, storage)
    index, n = records.cells, records.cells.numel()
    generation = torch.as_tensor(generation)
    if generation.is_floating_point() or generation.dtype == torch.bool:
        raise TypeError(f"generation must hold integers, got dtype {generation.dtype}.")
    generation = generation.to(torch.long).reshape(-1)
    if generation.numel() != n:
        raise ValueError(
            f"generation has {generation.numel()} entries, expected one per index ({n})."
        )
    items = patch.items(True, True) if isinstance(patch, TensorDictBase) else patch.items()
    leaves: list[tuple[torch.Tensor, torch.Tensor]] = []
    known = set(storage.leaf_keys())
    vkey = None if version_key is None else normalize_key(version_key, "version_key", dotted=False)
    for key, value in items:
        key = normalize_key(key, "patch key")
        if vkey is not None and key == vkey:
            raise ValueError(f"version_key {vkey!r} may not appear in patch.")
        if key not in known:
            raise KeyError(
                f"patch key {key!r} is not stored; stored keys are {sorted(map(str, known))}."
            )
        leaf = storage.get_leaf(key)
        value = records.patch_rows(torch.as_tensor(value), leaf, key)
        if value.dtype != leaf.dtype:
            raise ValueError(f"patch[{key!r}] has dtype {value.dtype}, expected {leaf.dtype}.")
        leaves.append((leaf, value))
    versioned: tuple[torch.Tensor, torch.Tensor] | None = None  # (stored leaf, incoming)
    if vkey is not None:
        if vkey not in known:
            raise KeyError(
                f"version_key {vkey!r} is not stored; stored keys are {sorted(map(str, known))}."
            )
        version_leaf = storage.get_leaf(vkey)
        if version_leaf[0].numel() != 1:
            raise ValueError(
                f"version_key {vkey!r} must name a scalar field, it has item shape "
                f"{tuple(version_leaf.shape[1:])}."
            )
        versions = torch.as_tensor(version).reshape(-1)
        if versions.numel() == 1:
            versions = versions.expand(n)
        elif versions.numel() != n:
            raise ValueError(f"version has {versions.numel()} entries, expected 1 or {n}.")
        versioned = (version_leaf, versions)
    # -- everything validated: compute masks, then write.
    live = (records.rows < records.items) & (writer.generations_of(records.rows) == generation)
    stale = ~live
    rejected = None
    apply = live.clone()
    if versioned is not None and n:
        version_leaf, versions = versioned
        stored = version_leaf.reshape(version_leaf.shape[0], -1)[index, 0]
        incoming = versions.to(stored.dtype)
        ok = incoming > stored if require_newer else incoming >= stored
        winners = _winners_by_version(index, versions)
        rejected = live & ~(ok & winners)
        apply = live & ok & winners
    elif n:
        apply = live & _last_occurrence(index)
    rows = apply.nonzero().squeeze(-1)
    slots = index[rows]
    for leaf, value in leaves:
        leaf[slots] = value[rows].to(leaf.device)
    if versioned is not None and rows.numel():
        version_leaf, versions = versioned
        flat = version_leaf.reshape(version_leaf.shape[0], -1)
        flat[slots, 0] = versions[rows].to(flat.dtype)
    updated = live if versioned is None else apply
    if rejected is None:
        return ConditionalUpdateResult(updated=updated, stale=stale)
    return ConditionalUpdateResult(updated=updated, stale=stale, version_rejected=rejected)
