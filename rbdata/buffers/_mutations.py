"""In-place updates of a buffer's records and priorities (mixed into ReplayBuffer)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from rbdata._updates import ConditionalUpdateResult, conditional_update, normalize_key
from rbdata.buffers._helpers import _prioritized_types

if TYPE_CHECKING:
    from rbdata.buffers.replay import ReplayBuffer


def check_priority_update(
    index: torch.Tensor | int, priority: torch.Tensor | float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``index`` and ``priority`` as 1-D tensors of one length (a scalar priority expanded).

    Raises:
        ValueError: if a priority is negative, NaN or infinite, or the lengths differ.
    """
    index = torch.as_tensor(index)
    if index.dtype != torch.long:
        index = index.long()
    if index.ndim != 1:
        index = index.reshape(-1)
    priority = torch.as_tensor(priority).detach()
    if not priority.is_floating_point():
        priority = priority.double()
    if priority.ndim != 1:
        priority = priority.reshape(-1)
    if priority.numel() == 1 and index.numel() != 1:
        priority = priority.expand(index.numel())
    if priority.numel() != index.numel():
        raise ValueError(
            f"priority has {priority.numel()} entries, expected one per index ({index.numel()})."
        )
    if priority.numel():
        low, high = torch.aminmax(priority)
        if not (low.item() >= 0 and high.item() < float("inf")):
            bad = priority[~torch.isfinite(priority) | (priority < 0)][:5].tolist()
            raise ValueError(f"priorities must be finite and >= 0, got {bad}.")
    return index, priority


class _BufferUpdates:
    """Priority updates, conditional patches, ``set_``/``update_`` and queries."""

    def update_priority(
        self,
        index: torch.Tensor | int,
        priority: torch.Tensor | float,
        *,
        generation: torch.Tensor | None = None,
    ) -> None:
        """Update the priorities of ``index`` (skipping slots rewritten since ``generation``).

        Raises:
            ValueError: if a priority is negative, NaN or infinite, or the lengths differ;
                nothing changes then.
        """
        index, priority = check_priority_update(index, priority)
        with self._lock:
            if generation is not None and getattr(self.writer, "_generations", None) is not None:
                live = self._writer.generation(index) == torch.as_tensor(generation).reshape(-1)
                self._skipped_priority_updates += int((~live).sum())
                index, priority = index[live], priority[live]
            if isinstance(self.sampler, _prioritized_types()):
                self._sampler._update_priority_validated(index, priority.contiguous())

    def update_if_present(
        self,
        *,
        index: torch.Tensor,
        generation: torch.Tensor,
        patch: Mapping[Any, torch.Tensor] | TensorDictBase,
        version_key: Any = None,
        version: int | torch.Tensor | None = None,
        require_newer: bool = False,
    ) -> ConditionalUpdateResult:
        """Patch the records whose (index, generation) is still live (see the reference doc)."""
        with self._lock:
            self._init()
            result = conditional_update(
                self._storage,
                self._writer,
                index=index,
                generation=generation,
                patch=patch,
                version_key=version_key,
                version=version,
                require_newer=require_newer,
            )
            self._mark_update(torch.as_tensor(index).reshape(-1)[result.updated])
            return result

    def set_(self, key: Any, value: torch.Tensor) -> ReplayBuffer:
        """Set the value of ``key`` across the whole buffer in place."""
        with self._lock:
            leaf = self._leaf(key)
            leaf[: len(self._storage)] = torch.as_tensor(value).to(leaf.dtype)
            self._mark_update(slice(0, len(self._storage)))
        return self

    def set_at_(self, key: Any, value: torch.Tensor, index: Any) -> ReplayBuffer:
        """Set the value of ``key`` at ``index`` in place."""
        with self._lock:
            leaf = self._leaf(key)
            leaf[index] = torch.as_tensor(value).to(leaf.dtype)
            self._mark_update(index)
        return self

    def update_(
        self,
        input_dict_or_td: Mapping[Any, torch.Tensor] | TensorDictBase,
        clone: bool = False,
        *,
        keys_to_update: Any = None,
    ) -> ReplayBuffer:
        """Update stored entries in place from a dict or TensorDict covering the buffer."""
        src = input_dict_or_td
        items = src.items(True, True) if isinstance(src, TensorDictBase) else src.items()
        wanted = (
            None
            if keys_to_update is None
            else {normalize_key(k, "keys_to_update") for k in keys_to_update}
        )
        for key, value in items:
            if wanted is None or key in wanted:
                self.set_(key, value.clone() if clone else value)
        return self

    def _leaf(self, key: Any) -> torch.Tensor:
        self._init()
        if not hasattr(self._storage, "get_leaf"):
            raise RuntimeError(f"{type(self._storage).__name__} does not support per-key updates.")
        key = normalize_key(key, "key")
        if key not in set(self._storage.leaf_keys()):
            raise KeyError(
                f"key {key!r} is not stored; stored keys are {self._storage.leaf_keys()}."
            )
        return self._storage.get_leaf(key)

    def query(self, predicate: Callable | None = None, *, trajectory_key: Any = None) -> list:
        """Return the stored trajectories matching ``predicate``, oldest first."""
        from rbdata.query import run_query

        with self._lock:
            self._init()
            return run_query(
                self._storage,
                transform=self._transform,
                cursor=getattr(self._writer, "cursor", 0),
                predicate=predicate,
                trajectory_key=trajectory_key,
            )

    # ------------------------------------------------------- state and stats
