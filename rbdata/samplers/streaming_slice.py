"""StreamingSliceSampler: fresh fixed-length windows first, then uniform slices (torchrl's)."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rbdata._component.checks import NestedKey, check_int
from rbdata.samplers._live import _LiveSet
from rbdata.samplers.slice import SliceSampler, SpanArg
from rbdata.storages import Storage
from rbdata.trajectories.reading import read_leaf

__all__ = ["StreamingSliceSampler"]

_EMPTY = torch.empty(0, dtype=torch.long)


class StreamingSliceSampler(SliceSampler):
    """A slice sampler that hands out each newly completed window once, before uniform slices.

    Writes are cut, in the order they arrive, into non-overlapping windows of
    ``slice_len`` items that never cross a trajectory boundary (a trajectory
    id change, an end flag, an ``is_init`` flag); an unfinished tail waits for
    the next write of the same trajectory. A sample returns queued windows
    first, oldest first, and completes the batch with uniform
    :class:`SliceSampler` slices. A window whose slots were overwritten
    before it was drawn is dropped (each slot carries a write stamp). Meant
    for a 1-D storage written in time order (one stream per buffer).

    Keyword Args:
        slice_len: the length of every slice (a positive int; required).
        **kwargs: ``end_key``, ``end_keys``, ``traj_key``, ``cache_values``,
            ``truncated_key``, ``init_key``, ``strict_length``, ``pad_output``,
            ``compile``, ``span``, ``use_gpu``: as :class:`SliceSampler`'s.
        replacement: accepted for torchrl compatibility: True changes nothing;
            False raises ``TypeError`` (this sampler has no without-replacement variant).

    Raises:
        TypeError: if ``slice_len`` is not an int.
        ValueError: if it is below 1.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, StreamingSliceSampler, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(16),
        ...     sampler=StreamingSliceSampler(slice_len=3),
        ...     batch_size=6,
        ... )
        >>> done = torch.zeros(6, 1, dtype=torch.bool)
        >>> _ = rb.extend(TensorDict({"value": torch.arange(6), ("next", "done"): done}, [6]))
        >>> rb.sample()["value"].reshape(2, 3)
        tensor([[0, 1, 2],
                [3, 4, 5]])
    """

    def __init__(
        self,
        *,
        slice_len: int,
        end_key: NestedKey | None = None,
        end_keys: Sequence[NestedKey] | None = None,
        traj_key: NestedKey | None = None,
        cache_values: bool = False,
        truncated_key: NestedKey | None = ("next", "truncated"),
        init_key: NestedKey | None = "is_init",
        strict_length: bool = True,
        pad_output: bool = False,
        compile: bool | dict[str, Any] = False,
        span: SpanArg = False,
        use_gpu: torch.device | bool = False,
        replacement: bool = True,
    ) -> None:
        check_int(slice_len, "slice_len", minimum=1)
        super().__init__(
            slice_len=slice_len,
            end_key=end_key,
            end_keys=end_keys,
            traj_key=traj_key,
            cache_values=cache_values,
            truncated_key=truncated_key,
            init_key=init_key,
            strict_length=strict_length,
            pad_output=pad_output,
            compile=compile,
            span=span,
            use_gpu=use_gpu,
            replacement=replacement,
        )
        self._window = int(slice_len)
        self._reset_stream()

    def _reset_stream(self) -> None:
        self._queued: collections.deque[tuple[torch.Tensor, torch.Tensor]] = collections.deque()
        self._unseen: list[tuple[torch.Tensor, torch.Tensor]] = []  # writes not cut yet
        self._pending, self._pending_stamps = _EMPTY, _EMPTY  # the unfinished tail
        self._stamps = _EMPTY  # per slot: how many times it was written
        self._last_id: torch.Tensor | None = None
        self._last_ended = False

    # ------------------------------------------------------------ writes
    def _on_write(self, index: torch.Tensor) -> None:
        super()._on_write(index)
        slots = index.reshape(-1).cpu().long()
        if not slots.numel():
            return
        size = int(slots.max()) + 1
        if self._stamps.numel() < size:
            grown = torch.zeros(max(size, 2 * self._stamps.numel()), dtype=torch.long)
            grown[: self._stamps.numel()] = self._stamps
            self._stamps = grown
        stamps = torch.empty_like(slots)
        for position, slot in enumerate(slots.tolist()):  # a slot may repeat in one write
            self._stamps[slot] += 1
            stamps[position] = self._stamps[slot]
        self._unseen.append((slots, stamps))

    def _on_empty(self) -> None:
        super()._on_empty()
        self._reset_stream()

    def _cut(self, storage: Storage) -> None:
        """Cut the writes seen since the last sample into windows (reads their markers)."""
        if storage.ndim != 1:
            raise RuntimeError("StreamingSliceSampler requires a one-dimensional storage.")
        if storage.max_size < self._window:
            raise ValueError(
                f"Storage capacity {storage.max_size} cannot hold one slice_len="
                f"{self._window} window."
            )
        markers = self._index.markers_for(storage)
        for slots, stamps in self._unseen:
            self._cut_one(storage, markers, slots, stamps)
        self._unseen = []
        while len(self._queued) > storage.max_size // self._window:  # overwritten since
            self._queued.popleft()

    def _cut_one(
        self, storage: Storage, markers: Any, slots: torch.Tensor, stamps: torch.Tensor
    ) -> None:
        n = slots.numel()
        if self._pending.numel() and not torch.equal(
            self._stamps[self._pending], self._pending_stamps
        ):
            self._pending, self._pending_stamps = _EMPTY, _EMPTY  # the tail was overwritten
        values = markers.read(storage, slots)
        ids = values if markers.kind == "ids" else None
        ended = torch.zeros(n, dtype=torch.bool) if ids is not None else values.bool()
        starts = self._init_flags(storage, slots)
        if n > 1:
            starts[1:] |= ended[:-1]
            if ids is not None:
                starts[1:] |= ids[1:] != ids[:-1]
        if self._last_ended:
            starts[0] = True
        if ids is not None and self._last_id is not None:
            starts[0] |= bool(ids[0] != self._last_id)
        if self._pending.numel() and not starts[0]:
            carried = self._pending.numel()
            slots = torch.cat([self._pending, slots])
            stamps = torch.cat([self._pending_stamps, stamps])
            ended = torch.cat([torch.zeros(carried, dtype=torch.bool), ended])
        else:
            carried = 0
        cuts = torch.cat([torch.zeros(1, dtype=torch.long), starts.nonzero().reshape(-1) + carried])
        cuts = cuts.unique(sorted=True)
        stops = torch.cat([cuts[1:], torch.tensor([slots.numel()])])
        self._pending, self._pending_stamps = _EMPTY, _EMPTY
        w = self._window
        for i, (a, b) in enumerate(zip(cuts.tolist(), stops.tolist(), strict=True)):
            whole = (b - a) // w * w
            if whole:
                self._queued.extend(
                    zip(
                        slots[a : a + whole].reshape(-1, w).unbind(0),
                        stamps[a : a + whole].reshape(-1, w).unbind(0),
                        strict=True,
                    )
                )
            if i == cuts.numel() - 1 and whole < b - a and not ended[b - 1]:
                self._pending = slots[a + whole : b].clone()
                self._pending_stamps = stamps[a + whole : b].clone()
        if ids is not None:
            self._last_id = ids[-1].clone()
        self._last_ended = bool(ended[-1])

    def _init_flags(self, storage: Storage, slots: torch.Tensor) -> torch.Tensor:
        """The stored ``is_init`` flags of ``slots`` (all False when not stored)."""
        try:
            flags = read_leaf(storage, "is_init", slots)
        except KeyError:
            return torch.zeros(slots.numel(), dtype=torch.bool)
        return flags.reshape(slots.numel(), -1).any(-1).cpu()

    # ------------------------------------------------------------ sampling
    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        num_slices, slice_len = self._shape(batch_size)
        if slice_len != self._window:
            raise RuntimeError(
                f"StreamingSliceSampler expected slice length {self._window}, got {slice_len}."
            )
        self._cut(storage)
        fresh: list[torch.Tensor] = []
        while self._queued and len(fresh) < num_slices:
            slots, stamps = self._queued.popleft()
            if int(slots.max()) < self._stamps.numel() and torch.equal(self._stamps[slots], stamps):
                fresh.append(slots)
        if not fresh:
            return super()._sample(storage, batch_size, live)
        flat = torch.cat(fresh)
        starts = np.arange(len(fresh), dtype=np.int64) * slice_len
        out = self._batcher.full(
            storage, lambda v: flat[torch.as_tensor(v, dtype=torch.long)], starts, slice_len
        )
        if len(fresh) == num_slices:
            return out.index, out.info
        rest_index, rest_info = super()._sample(
            storage, (num_slices - len(fresh)) * slice_len, live
        )
        info = {
            key: torch.cat([out.info[key], rest_info[key]])
            for key in out.info.keys() & rest_info.keys()
        }
        return torch.cat([out.index, rest_index]), info

    # ------------------------------------------------------------ state
    def _extra_state(self) -> dict[str, Any]:
        w = self._window
        queued = list(self._queued)
        return {
            **super()._extra_state(),
            "slot_versions": self._stamps.clone(),
            "queued_indices": torch.stack([q[0] for q in queued]) if queued else _EMPTY.view(0, w),
            "queued_versions": torch.stack([q[1] for q in queued]) if queued else _EMPTY.view(0, w),
            "pending_indices": self._pending.clone(),
            "pending_versions": self._pending_stamps.clone(),
            "last_traj": _EMPTY if self._last_id is None else self._last_id.clone().reshape(-1),
            "has_last_traj": self._last_id is not None,
            "last_was_done": self._last_ended,
            "slice_len": w,
        }

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        if "slot_versions" not in state_dict:
            super()._load_extra_state(state_dict)
            return
        saved_len = int(state_dict.get("slice_len", self._window))
        if saved_len != self._window:
            raise ValueError(
                f"Cannot restore slice_len={saved_len} into a slice_len={self._window} "
                "StreamingSliceSampler."
            )
        super()._load_extra_state(state_dict)
        tensors = {
            key: torch.as_tensor(state_dict[key]).long().cpu().clone()
            for key in (
                "slot_versions",
                "queued_indices",
                "queued_versions",
                "pending_indices",
                "pending_versions",
            )
        }
        has_last = bool(state_dict.get("has_last_traj", False))
        last = torch.as_tensor(state_dict.get("last_traj", _EMPTY)).cpu().clone()
        self._unseen = []
        self._stamps = tensors["slot_versions"]
        self._queued = collections.deque(
            zip(
                tensors["queued_indices"].unbind(0),
                tensors["queued_versions"].unbind(0),
                strict=True,
            )
        )
        self._pending, self._pending_stamps = (
            tensors["pending_indices"],
            tensors["pending_versions"],
        )
        self._last_id = last.reshape(()) if has_last and last.numel() == 1 else None
        self._last_ended = bool(state_dict.get("last_was_done", False))
