"""Where each leaf of an item lives in its packed byte row."""

from __future__ import annotations

import math

import torch

#: packed rows are gathered as 8-byte words
_WORD = torch.int64


class _PackedLayout:
    """Where each leaf lives in a packed row.

    Args:
        dtypes: dtype of each leaf.
        shapes: per-item shape of each leaf.
    """

    def __init__(self, dtypes: list[torch.dtype], shapes: list[tuple[int, ...]]) -> None:
        self.dtypes = list(dtypes)
        self.shapes = [tuple(shape) for shape in shapes]
        self.numels = [math.prod(shape) for shape in self.shapes]
        itemsizes = [dtype.itemsize for dtype in self.dtypes]
        rank = {dtype: i for i, dtype in reversed(list(enumerate(self.dtypes)))}
        order = sorted(range(len(dtypes)), key=lambda i: (-itemsizes[i], rank[dtypes[i]]))
        self.offsets = [0] * len(dtypes)
        offset = 0
        for i in order:
            self.offsets[i] = offset
            offset += itemsizes[i] * self.numels[i]
        align = max([8, *itemsizes])
        self.row_bytes = max(align, -(-offset // align) * align)
        self.row_words = self.row_bytes // _WORD.itemsize
        # one (dtype, split sizes) per dtype group; pick[i] = (group, piece) of leaf i
        self.groups: list[tuple[torch.dtype, list[int]]] = []
        self.pick: list[tuple[int, int]] = [(0, 0)] * len(dtypes)
        for i in order:
            dtype = self.dtypes[i]
            if not self.groups or self.groups[-1][0] != dtype:
                before = self.offsets[i] // dtype.itemsize
                self.groups.append((dtype, [before] if before else []))
            sizes = self.groups[-1][1]
            self.pick[i] = (len(self.groups) - 1, len(sizes))
            sizes.append(self.numels[i])
        for dtype, sizes in self.groups:
            after = self.row_bytes // dtype.itemsize - sum(sizes)
            if after:
                sizes.append(after)
        # leaves whose split piece [B, numel] already has the item shape
        self.direct = [len(shape) == 1 for shape in self.shapes]

    def same_as(self, other: _PackedLayout) -> bool:
        """Whether both layouts describe the same leaves."""
        return self.dtypes == other.dtypes and self.shapes == other.shapes
