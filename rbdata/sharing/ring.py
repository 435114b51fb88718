"""Slots of a ring of rows: where a write of ``n`` rows at a cursor lands, wrapping at the end."""

from __future__ import annotations

import functools

import torch

__all__ = ["Ranges", "ring_ranges", "ring_slots"]

#: two row ranges ``(a, b, c, d)``: ``[a, b)`` then ``[c, d)`` (empty when ``c == d``)
Ranges = tuple[int, int, int, int]


def ring_ranges(start: int, n: int, capacity: int) -> Ranges:
    """The rows ``start .. start + n - 1`` of a ring of ``capacity`` rows, as two ranges.

    Examples:
        >>> ring_ranges(6, 4, 8)
        (6, 8, 0, 2)
    """
    stop = start + n
    if stop <= capacity:
        return start, stop, 0, 0
    return start, capacity, 0, stop - capacity


@functools.lru_cache(maxsize=16)
def _first(n: int) -> torch.Tensor:
    return torch.arange(n)


def ring_slots(start: int, n: int, capacity: int) -> torch.Tensor:
    """The slots ``start .. start + n - 1`` of a ring of ``capacity`` slots (``n <= capacity``).

    Examples:
        >>> ring_slots(3, 3, 4).tolist()
        [3, 0, 1]
    """
    if start + n <= capacity:  # one run: one arange (cheaper than the cached one shifted)
        return torch.arange(start, start + n)
    index = _first(n) + start  # a new tensor: the cached arange is never changed
    index %= capacity
    return index
