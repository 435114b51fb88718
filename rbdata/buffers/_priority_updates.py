"""Priority updates of a replay buffer: by index, by coordinates, by sampled batch.

An update is checked before any priority changes (:func:`check_priority_update`,
:func:`check_priorities`), slots rewritten since the batch was sampled are
skipped (generations), and the per-record priorities of an expanded batch (a
:class:`~rbdata.Sequence` one) are put on its anchors (:func:`reduce_to_anchors`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rbdata._component.checks import check_indices
from rbdata.buffers._components import _Components
from rbdata.buffers._coordinates import items_of, to_coordinates
from rbdata.samplers import PrioritizedSampler
from rbdata.samplers._priority_checks import CheckedUpdate
from rbdata.samplers._priority_store import priority_bounds

__all__ = ["check_priorities", "check_priority_update", "reduce_to_anchors"]


class _PriorityUpdates:
    """Priority updates: validated once, generation-checked, routed to anchors for sequences.

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, PrioritizedSampler, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4),
        ...                   sampler=PrioritizedSampler(4, alpha=1.0, beta=1.0))
        >>> _ = rb.extend(torch.arange(4))
        >>> rb.update_priority(torch.tensor([0, 1, 2, 3]), torch.tensor([0.0, 0.0, 1.0, 0.0]))
        >>> rb.sample(3).tolist()
        [2, 2, 2]
    """

    def __init__(self, components: _Components) -> None:
        self._components = components

    def update_priority(
        self,
        index: torch.Tensor | tuple[torch.Tensor, ...] | int,
        priority: torch.Tensor | float,
        generation: torch.Tensor | None,
    ) -> None:
        """Update the priorities of ``index`` (skipping slots rewritten since ``generation``)."""
        c = self._components
        c.init()
        with c.sync.lock:
            flat = c.flat_index(index)
            if c.storage.ndim > 1:
                priority = torch.as_tensor(priority)
                if priority.ndim > 1 and c.dim_extend > 0:
                    priority = priority.movedim(c.dim_extend, 0)
            sampler = c.sampler
            if not isinstance(sampler, PrioritizedSampler):
                flat, priority = check_priority_update(flat, priority, len(c.storage))
                flat, priority = self._live_entries(flat, priority, generation)
                sampler.update_priority(flat, priority, storage=c.storage)
                return
            update = sampler.checked_update(flat, priority, c.storage)  # the one validation
            if update is None:
                self._live_entries(torch.zeros(0, dtype=torch.long), None, generation)
                return
            index, values = self._live_entries(update.slots, update.priority, generation)
            if index.numel() != update.slots.numel():  # rewritten slots skipped: new bounds
                low, high = priority_bounds(values) if values.numel() else (0.0, 0.0)
                update = CheckedUpdate(index, values, low, high)
            sampler.apply_update(update, c.storage)

    def _live_entries(
        self, index: torch.Tensor, priority: Any, generation: torch.Tensor | None
    ) -> tuple[torch.Tensor, Any]:
        """The entries whose slot still holds the item of ``generation`` (all without one)."""
        c = self._components
        if generation is None or not c.writer.tracks_generations:
            return index, priority
        generation = torch.as_tensor(generation, dtype=torch.long).reshape(-1)
        if generation.numel() != index.numel():
            raise ValueError(
                f"generation has {generation.numel()} entries, expected one per index "
                f"({index.numel()})."
            )
        live = c.writer.generations_of(items_of(index, c.cells_per_item())) == generation
        skipped = int((~live).sum())
        c.stats.count_skipped_priority_updates(skipped)
        if not skipped:
            return index, priority
        return index[live], priority[live]

    def update_batch_priority(
        self, batch: Any, priority: torch.Tensor, apply: Callable[..., None]
    ) -> None:
        """Apply new priorities to a batch this buffer handed out (skipping rewritten rows).

        ``apply`` is the buffer's ``update_priority`` (a subclass's override, or a
        wrapper set on the buffer, sees every update).
        """
        c = self._components
        c.init()
        if not c.sampler.prioritized:
            return
        index = c.flat_index(batch["index"], 'batch["index"]')
        generation = (
            batch.get("index_generation", None)
            if isinstance(batch, Mapping | TensorDictBase)
            else None
        )
        priority = torch.as_tensor(priority).detach()
        if priority.numel() == index.numel():
            priority = priority.reshape(index.shape)
        self.update_record_priority(batch, index, priority, generation, apply)

    def update_record_priority(
        self,
        batch: Any,
        index: torch.Tensor,
        priority: torch.Tensor,
        generation: Any,
        apply: Callable[..., None],
    ) -> None:
        """Priorities of a sampled batch's records: to the records, or to their anchors.

        ``apply(index, priority, generation=...)`` is the buffer's ``update_priority``.
        """
        with self._components.sync.lock:
            reduced = self.anchor_reduced_priority(
                batch, priority, index=index, generation=generation
            )
            if reduced is None:
                apply(index, priority, generation=generation)
            else:
                apply(*reduced)

    def anchor_reduced_priority(
        self,
        batch: Any,
        priority: torch.Tensor,
        *,
        index: torch.Tensor | None = None,
        generation: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The distinct anchors of a batch's records and the max priority of their valid ones.

        None when the records are their own anchors (no :class:`~rbdata.Sequence`
        unit, whatever ``"anchor_index"`` the batch holds). Anchors are given as
        ``update_priority`` takes them back (coordinates ``[N, ndim]`` for a
        storage with ``ndim > 1``); with the records' flat ``index`` and their
        ``generation``, an anchor with a record rewritten since the batch was
        sampled is left out (and counted as skipped).
        """
        c = self._components
        c.init()
        anchors = c.sample_unit.anchors_of(batch, c.storage)
        if anchors is None:
            return None
        live = None
        if index is not None and generation is not None and c.writer.tracks_generations:
            generation = torch.as_tensor(generation, dtype=torch.long).reshape(-1)
            items = items_of(index.reshape(-1), c.cells_per_item())
            live = c.writer.generations_of(items) == generation
        anchors, priority, skipped = reduce_to_anchors(
            anchors, priority, batch.get("validity_mask", None), live
        )
        c.stats.count_skipped_priority_updates(skipped)
        if c.storage.ndim > 1:
            anchors = to_coordinates(anchors, c.storage_shape())
        return anchors, priority


# ------------------------------------------------------------ the checks of an update

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


# ------------------------------------------------------------ records' priorities on anchors


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
