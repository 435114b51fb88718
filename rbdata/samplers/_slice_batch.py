"""What a slice sampler returns for drawn slices: the flat slot index and torchrl's info entries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rbdata._component.checks import NestedKey
from rbdata.storages import Storage
from rbdata.trajectories.reading import read_leaf, storage_keys

#: Where ``pad_output`` puts the mask of real (True) and repeated (False) steps.
MASK_KEY: NestedKey = ("collector", "mask")

ToSlots = Callable[[np.ndarray], torch.Tensor]


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
        >>> out = batcher.ragged(storage, torch.from_numpy, torch.tensor([2, 7]),
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
        #: Set while no stored done flag falls inside a trajectory (e.g. the done flags
        #: are end markers): a stored flag can then only be at a slice's last
        #: transition, so the done entry is the truncation and is not read.
        self.done_is_truncation = False
        self._stored: _Stored | None = None
        self._template: tuple[int, int, np.ndarray, torch.Tensor, torch.Tensor] | None = None

    @property
    def done_key(self) -> NestedKey | None:
        """The done entry of the info (None without ``truncated_key``)."""
        return None if self._end_keys is None else self._end_keys[1]

    def stores_done(self, storage: Storage) -> bool:
        """Whether ``storage`` holds the done entry beside ``truncated_key``."""
        return self._stored_entries(storage).done

    def forget(self) -> None:
        """The storage was emptied: look again at which entries it holds."""
        self._stored = None

    def full(
        self, storage: Storage, to_slots: ToSlots, starts: np.ndarray, slice_len: int
    ) -> Slices:
        """Slices of ``slice_len`` transitions at the positions ``starts``."""
        n = starts.size
        offsets, marks, first = self._full_template(n, slice_len)
        index = to_slots((starts[:, None] + offsets).reshape(-1))
        marks = marks.clone() if self._end_keys is not None else marks  # info entries are fresh
        return Slices(index, self._info(storage, index, marks, first, None), None)

    def ragged(
        self,
        storage: Storage,
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
            index = to_slots((starts.unsqueeze(1) + steps).view(-1).numpy())
            first = torch.arange(0, n * slice_len, slice_len)
            slice_id = torch.arange(n).repeat_interleave(slice_len)
            marks = _marks(index.numel(), first + lengths - 1)
            info = self._info(storage, index, marks, _column(index.numel(), first), mask.view(-1))
            return Slices(index, info, slice_id)
        slice_id = torch.repeat_interleave(lengths)
        ends = torch.cumsum(lengths, 0)
        first = ends - lengths
        index = to_slots(torch.arange(slice_id.numel()).add_((starts - first)[slice_id]).numpy())
        m = index.numel()
        info = self._info(storage, index, _marks(m, ends - 1), _column(m, first), None)
        return Slices(index, info, slice_id)

    # ------------------------------------------------------------ info
    def _full_template(
        self, n: int, slice_len: int
    ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        """``arange(slice_len)``, the end marks and the first-transition column of full slices."""
        if self._template is None or self._template[:2] != (n, slice_len):
            rows = torch.arange(0, n * slice_len, slice_len)
            marks = _marks(n * slice_len, rows + slice_len - 1)
            first = _column(n * slice_len, rows)
            self._template = (n, slice_len, np.arange(slice_len), marks, first)
        return self._template[2:]

    def _stored_entries(self, storage: Storage) -> _Stored:
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
        storage: Storage,
        index: torch.Tensor,
        marks: torch.Tensor,
        first: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> dict[Any, torch.Tensor]:
        """The info of slices whose first transitions are True in ``first``.

        ``marks`` (fresh, ``[3, n, 1]``) is True at the slices' last transitions
        in its first two planes (truncated, done) and False in the third (terminated).
        """
        info: dict[Any, torch.Tensor] = {}
        stored = self._stored_entries(storage)
        if self._end_keys is not None:
            truncated_key, done_key, terminated_key = self._end_keys
            truncated, done, terminated = marks.unbind(0)
            info[truncated_key] = truncated
            if stored.done and (mask is not None or not self.done_is_truncation):
                done = _or(read_leaf(storage, done_key, index), truncated)
            info[done_key] = done
            if stored.terminated:
                terminated = read_leaf(storage, terminated_key, index)
            info[terminated_key] = terminated
        if mask is not None:
            info[MASK_KEY] = mask
        if stored.init and self.init_key is not None:
            info[self.init_key] = _or(read_leaf(storage, self.init_key, index), first)
        return info


def _column(n: int, rows: torch.Tensor) -> torch.Tensor:
    """A bool ``[n, 1]`` column, True at ``rows``."""
    column = torch.zeros(n, 1, dtype=torch.bool)
    column[rows] = True
    return column


def _marks(n: int, last: torch.Tensor) -> torch.Tensor:
    """Bool ``[3, n, 1]``: True at the rows ``last`` in the first two planes, False in the third."""
    marks = torch.zeros(3, n, 1, dtype=torch.bool)
    marks[:2, last] = True
    return marks


def _or(flags: torch.Tensor, column: torch.Tensor) -> torch.Tensor:
    """The stored ``flags`` (a fresh tensor) OR-ed with a bool ``[n, 1]`` column, per row."""
    marks = column.view(-1, *[1] * (flags.ndim - 1)).to(flags.device)
    if flags.is_floating_point() or flags.is_complex():
        return flags.masked_fill_(marks, 1)
    return flags.bitwise_or_(marks)
