"""What a slice sampler returns for drawn slices: the flat slot index and torchrl's info entries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rbdata._trajectories import read_leaf, storage_keys
from rbdata._validation import NestedKey

#: Where ``pad_output`` puts the mask of real (True) and repeated (False) steps.
MASK_KEY: NestedKey = ("collector", "mask")

ToSlots = Callable[[torch.Tensor], torch.Tensor]


def replace_last(key: NestedKey, name: str) -> NestedKey:
    """``key`` with its last element replaced by ``name`` (``("next", "done")`` for truncated)."""
    return name if isinstance(key, str) else (*key[:-1], name)


@dataclass(frozen=True)
class _Stored:
    """Which of the entries the info is made of are stored (read once per storage layout)."""

    done: bool
    terminated: bool
    init: bool


@dataclass
class Slices:
    """Drawn slices: the flat slot index, its info, and the slice of every transition.

    Attributes:
        index: the storage slots, slice after slice.
        info: the info entries (see :class:`SliceBatcher`).
        slice_id: the slice of each transition (None: every slice has
            ``slice_len`` transitions, so transition ``i`` is in slice ``i // slice_len``).
    """

    index: torch.Tensor
    info: dict[Any, torch.Tensor]
    slice_id: torch.Tensor | None


class SliceBatcher:
    """Builds the flat index and the info of a batch of slices, as torchrl's slice samplers do.

    The info holds, unless ``truncated_key`` is None: ``truncated_key`` (bool
    ``[N, 1]``, True at the last transition of every slice), the ``done``
    entry beside it (the stored flags OR-ed with the truncation, or the
    truncation when not stored) and the ``terminated`` entry (stored, or False
    ``[N, 1]``). When ``init_key`` is stored, it holds the stored flags OR-ed
    with True at the first transition of every slice. Padded batches also hold
    the bool ``[N]`` mask under ``("collector", "mask")``.

    Args:
        truncated_key: where the end-of-slice markers go (None: no markers).
        init_key: the entry marked at slice starts (None: left as stored).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(slice(0, 10), TensorDict({"obs": torch.arange(10)}, [10]))
        >>> batcher = SliceBatcher(("next", "truncated"), "is_init")
        >>> out = batcher.ragged(storage, lambda v: v, torch.tensor([2, 7]),
        ...                      torch.tensor([3, 1]), slice_len=3, pad=True)
        >>> out.index.tolist(), out.info[("collector", "mask")].tolist()
        ([2, 3, 4, 7, 7, 7], [True, True, True, True, False, False])
        >>> out.info[("next", "truncated")].view(-1).tolist()
        [False, False, True, True, False, False]
    """

    def __init__(self, truncated_key: NestedKey | None, init_key: NestedKey | None) -> None:
        self.truncated_key = truncated_key
        self.init_key = init_key
        self._end_keys = (
            None
            if truncated_key is None
            else (
                truncated_key,
                replace_last(truncated_key, "done"),
                replace_last(truncated_key, "terminated"),
            )
        )
        self._stored: _Stored | None = None
        self._template: tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def forget(self) -> None:
        """The storage was emptied: look again at which entries it holds."""
        self._stored = None

    def full(self, storage: Any, to_slots: ToSlots, starts: torch.Tensor, slice_len: int) -> Slices:
        """Slices of ``slice_len`` transitions at the positions ``starts``."""
        n = starts.numel()
        offsets, first, last = self._full_template(n, slice_len)
        index = to_slots(torch.add(starts.view(n, 1), offsets).view(-1))
        return Slices(index, self._info(storage, index, last, first, None), None)

    def ragged(
        self,
        storage: Any,
        to_slots: ToSlots,
        starts: torch.Tensor,
        lengths: torch.Tensor,
        slice_len: int,
        pad: bool,
    ) -> Slices:
        """Slices of ``lengths`` transitions at ``starts``; ``pad`` repeats last steps."""
        n = starts.numel()
        if pad:
            offsets = torch.arange(slice_len)
            mask = offsets < lengths.unsqueeze(1)
            steps = torch.minimum(offsets, (lengths - 1).unsqueeze(1))
            index = to_slots((starts.unsqueeze(1) + steps).view(-1))
            first = torch.arange(0, n * slice_len, slice_len)
            slice_id = torch.arange(n).repeat_interleave(slice_len)
            info = self._info(storage, index, first + lengths - 1, first, mask.view(-1))
            return Slices(index, info, slice_id)
        slice_id = torch.repeat_interleave(lengths)
        ends = torch.cumsum(lengths, 0)
        first = ends - lengths
        index = to_slots(torch.arange(slice_id.numel()).add_((starts - first)[slice_id]))
        return Slices(index, self._info(storage, index, ends - 1, first, None), slice_id)

    # ------------------------------------------------------------ info
    def _full_template(
        self, n: int, slice_len: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``arange(slice_len)``, the rows of the first and of the last transitions (cached)."""
        if self._template is None or self._template[:2] != (n, slice_len):
            first = torch.arange(0, n * slice_len, slice_len)
            self._template = (n, slice_len, torch.arange(slice_len), first, first + slice_len - 1)
        return self._template[2:]

    def _stored_entries(self, storage: Any) -> _Stored:
        if self._stored is None:
            keys = storage_keys(storage)
            _, done, terminated = self._end_keys or (None, None, None)
            self._stored = _Stored(
                done=done in keys,
                terminated=terminated in keys,
                init=self.init_key is not None and self.init_key in keys,
            )
        return self._stored

    def _info(
        self,
        storage: Any,
        index: torch.Tensor,
        last: torch.Tensor,
        first: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> dict[Any, torch.Tensor]:
        info: dict[Any, torch.Tensor] = {}
        if self.truncated_key is None and self.init_key is None and mask is None:
            return info
        stored = self._stored_entries(storage)
        n = index.numel()
        if self._end_keys is not None:
            truncated_key, done_key, terminated_key = self._end_keys
            truncated = torch.zeros(n, 1, dtype=torch.bool)
            truncated[last] = True
            info[truncated_key] = truncated
            info[done_key] = (
                _or_at(read_leaf(storage, done_key, index), last)
                if stored.done
                else truncated.clone()
            )
            info[terminated_key] = (
                read_leaf(storage, terminated_key, index)
                if stored.terminated
                else torch.zeros_like(truncated)
            )
        if mask is not None:
            info[MASK_KEY] = mask
        if stored.init and self.init_key is not None:
            info[self.init_key] = _or_at(read_leaf(storage, self.init_key, index), first)
        return info


def _or_at(flags: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The stored ``flags`` (a fresh tensor) with every value of the ``rows`` set to True."""
    flags[rows] = True
    return flags
