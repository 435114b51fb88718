"""How many slices a trajectory offers: the start offsets and the draw weight of a length."""

from __future__ import annotations

import numpy as np
import torch


def span_amount(value: bool | int, slice_len: int, name: str) -> int:
    """How many transitions a ``span`` side lets a slice lose (True: all but one).

    Examples:
        >>> span_amount(True, 5, "span"), span_amount(3, 5, "span"), span_amount(9, 5, "span")
        (4, 3, 4)
    """
    if isinstance(value, bool):
        return slice_len - 1 if value else 0
    if isinstance(value, int) and value >= 0:
        return min(value, slice_len - 1)
    raise ValueError(f"{name} must be a bool or an int >= 0, got {value!r}.")


class SliceWeight:
    """Where slices may start in a trajectory of a given length, and its draw weight.

    ``room(length)`` counts the start offsets: ``length - slice_len + 1`` plus
    the spans, at least 1 (a short trajectory gives one short slice); under
    ``strict``, 0 for a trajectory shorter than ``slice_len`` or, with
    ``keep_short`` (torchrl's prioritized rule), only when no start is left.
    A trajectory with room has draw weight 1 (trajectories are drawn
    uniformly, as torchrl does), else 0.

    Examples:
        >>> import torch
        >>> weight = SliceWeight(slice_len=4, strict=True, left=0, right=0)
        >>> weight.rooms(torch.tensor([2, 4, 10])).tolist()
        [0, 1, 7]
        >>> weight.many(torch.tensor([2, 4, 10])).tolist()
        [0, 1, 1]
    """

    def __init__(
        self, slice_len: int, strict: bool, left: int, right: int, keep_short: bool = False
    ) -> None:
        self.slice_len, self.strict, self.left, self.right = slice_len, strict, left, right
        #: ``room(length) = length + extra`` (before the floor / strict rule).
        self.extra = 1 - slice_len + left + right
        self._floor = 0 if strict else 1
        self._drop_short = strict and not keep_short

    def room(self, length: int) -> int:
        """The number of start offsets of a trajectory of ``length`` transitions."""
        if self._drop_short and length < self.slice_len:
            return 0
        return max(length + self.extra, self._floor)

    def rooms(self, lengths: torch.Tensor) -> torch.Tensor:
        """:meth:`room` of every length (a new tensor)."""
        room = (lengths + self.extra).clamp_min_(self._floor)
        return room.masked_fill_(lengths < self.slice_len, 0) if self._drop_short else room

    def one(self, length: int) -> int:
        """The draw weight of a trajectory of ``length`` transitions (0 or 1)."""
        return int(self.room(length) > 0)

    def many(self, lengths: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """:meth:`one` of every length, of the same kind (tensor or array)."""
        if isinstance(lengths, np.ndarray):
            return self.rooms(torch.from_numpy(lengths)).gt_(0).long().numpy()
        return self.rooms(lengths).gt_(0).long()


def _span_amount(value: bool | int, slice_len: int, name: str) -> int:
    if isinstance(value, bool):
        return slice_len - 1 if value else 0
    if isinstance(value, int) and value >= 0:
        return min(value, slice_len - 1)
    raise ValueError(f"{name} must be a bool or an int >= 0, got {value!r}.")
