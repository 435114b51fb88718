"""Priority updates of a replay buffer: by index, by coordinates, by sampled batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata.buffers._anchor_priority import reduce_to_anchors
from rbdata.buffers._components import _Components
from rbdata.buffers._coordinates import items_of, to_coordinates
from rbdata.buffers._priority import check_priority_update
from rbdata.samplers import PrioritizedSampler
from rbdata.samplers._priority_checks import CheckedUpdate
from rbdata.samplers._priority_store import priority_bounds


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

    def update_batch_priority(self, batch: Any, priority: torch.Tensor) -> None:
        """Apply new priorities to a batch this buffer handed out (skipping rewritten rows)."""
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
        self.update_record_priority(batch, index, priority, generation)

    def update_record_priority(
        self, batch: Any, index: torch.Tensor, priority: torch.Tensor, generation: Any
    ) -> None:
        """Priorities of a sampled batch's records: to the records, or to their anchors."""
        with self._components.sync.lock:
            reduced = self.anchor_reduced_priority(
                batch, priority, index=index, generation=generation
            )
            if reduced is None:
                self.update_priority(index, priority, generation)
            else:
                self.update_priority(*reduced, None)

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
