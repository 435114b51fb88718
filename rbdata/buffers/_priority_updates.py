"""Priority updates of a replay buffer: by index, by coordinates, by sampled batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata.buffers._anchor_priority import reduce_to_anchors
from rbdata.buffers._components import _BufferBase
from rbdata.buffers._coordinates import items_of, to_coordinates
from rbdata.buffers._priority import check_priority_update
from rbdata.samplers import PrioritizedSampler
from rbdata.samplers._priority_checks import CheckedUpdate
from rbdata.samplers._priority_store import priority_bounds


class _PriorityUpdates(_BufferBase):
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

    def update_priority(
        self,
        index: torch.Tensor | tuple[torch.Tensor, ...] | int,
        priority: torch.Tensor | float,
        *,
        generation: torch.Tensor | None = None,
    ) -> None:
        """Update the priorities of ``index`` (skipping slots rewritten since ``generation``).

        With a storage of ``ndim > 1``, ``index`` may hold coordinates, as
        :meth:`extend` and ``info["index"]`` give them (``[N, ndim]`` or a tuple
        of ``ndim`` tensors), or flat cells (1-D). A priority of several dims is
        laid out like the data given to ``extend``: its dim ``dim_extend`` is
        moved first, as ``extend`` does with the data, before it is flattened.

        Raises:
            TypeError: for an index that does not hold integers.
            ValueError: if a priority is negative, NaN or infinite, the lengths
                differ, coordinates have the wrong width or lie outside the
                storage, or an index is outside the written slots; nothing
                changes then.
        """
        self._init()
        with self._sync.lock:
            flat = self._flat_index(index)
            if self._storage.ndim > 1:
                priority = torch.as_tensor(priority)
                if priority.ndim > 1 and self.dim_extend > 0:
                    priority = priority.movedim(self.dim_extend, 0)
            sampler = self._sampler
            if not isinstance(sampler, PrioritizedSampler):
                flat, priority = check_priority_update(flat, priority, len(self._storage))
                flat, priority = self._live_entries(flat, priority, generation)
                sampler.update_priority(flat, priority, storage=self._storage)
                return
            update = sampler.checked_update(flat, priority, self._storage)  # the one validation
            if update is None:
                self._live_entries(torch.zeros(0, dtype=torch.long), None, generation)
                return
            index, values = self._live_entries(update.slots, update.priority, generation)
            if index.numel() != update.slots.numel():  # rewritten slots skipped: new bounds
                low, high = priority_bounds(values) if values.numel() else (0.0, 0.0)
                update = CheckedUpdate(index, values, low, high)
            sampler.apply_update(update, self._storage)

    def _live_entries(
        self, index: torch.Tensor, priority: Any, generation: torch.Tensor | None
    ) -> tuple[torch.Tensor, Any]:
        """The entries whose slot still holds the item of ``generation`` (all without one)."""
        if generation is None or not self._writer.tracks_generations:
            return index, priority
        generation = torch.as_tensor(generation, dtype=torch.long).reshape(-1)
        if generation.numel() != index.numel():
            raise ValueError(
                f"generation has {generation.numel()} entries, expected one per index "
                f"({index.numel()})."
            )
        live = self._writer.generations_of(items_of(index, self._cells_per_item())) == generation
        skipped = int((~live).sum())
        self._stats.count_skipped_priority_updates(skipped)
        if not skipped:
            return index, priority
        return index[live], priority[live]

    def update_batch_priority(self, batch: Any, priority: torch.Tensor) -> None:
        """Apply new priorities to a batch this buffer handed out (skipping rewritten rows).

        With a :class:`~rbdata.Sequence` unit the records' priorities go to
        their anchors (the max over each window's valid records).
        """
        if not self.prioritized:
            return
        index = self._flat_index(batch["index"], 'batch["index"]')
        generation = (
            batch.get("index_generation", None)
            if isinstance(batch, Mapping | TensorDictBase)
            else None
        )
        priority = torch.as_tensor(priority).detach()
        if priority.numel() == index.numel():
            priority = priority.reshape(index.shape)
        self._update_record_priority(batch, index, priority, generation)

    def _update_record_priority(
        self, batch: Any, index: torch.Tensor, priority: torch.Tensor, generation: Any
    ) -> None:
        """Priorities of a sampled batch's records: to the records, or to their anchors."""
        with self._sync.lock:
            reduced = self._anchor_reduced_priority(
                batch, priority, index=index, generation=generation
            )
            if reduced is None:
                self.update_priority(index, priority, generation=generation)
            else:
                self.update_priority(*reduced)

    def _anchor_reduced_priority(
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
        anchors = self._sample_unit.anchors_of(batch, self.storage)
        if anchors is None:
            return None
        live = None
        if index is not None and generation is not None and self._writer.tracks_generations:
            generation = torch.as_tensor(generation, dtype=torch.long).reshape(-1)
            items = items_of(index.reshape(-1), self._cells_per_item())
            live = self._writer.generations_of(items) == generation
        anchors, priority, skipped = reduce_to_anchors(
            anchors, priority, batch.get("validity_mask", None), live
        )
        self._stats.count_skipped_priority_updates(skipped)
        if self._storage.ndim > 1:
            anchors = to_coordinates(anchors, self._storage_shape())
        return anchors, priority
