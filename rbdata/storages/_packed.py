"""Packed rows: every leaf of an item in one contiguous byte row.

One gather of whole rows (viewed as 8-byte words) replaces one gather per
leaf; the leaves of a batch are then views of the gathered rows. Leaves are
laid out by decreasing itemsize and grouped by dtype, so each leaf sits at an
offset aligned to its itemsize and all the leaves of one dtype are carved out
of a batch with a single ``split_with_sizes``.
"""

from __future__ import annotations

import torch

from ._assemble import _RowAssembler
from ._recycle import _GatherPool
from ._row_layout import _WORD, _PackedLayout

_SHAPE_CACHE_SIZE = 64
#: torch copies (and ``cat``s into) at least this many elements on all its intra-op threads
_GRAIN_SIZE = 32768


class _PackedRows:
    """``capacity`` packed rows and a full-capacity view of each leaf.

    Args:
        layout: the row layout.
        packed: a ``uint8`` tensor ``[capacity, layout.row_bytes]``.
        out_device: device the read batches are moved to (``None``: the rows' device).
    """

    def __init__(
        self, layout: _PackedLayout, packed: torch.Tensor, out_device: torch.device | None = None
    ) -> None:
        self.layout = layout
        self.packed = packed
        self.capacity = packed.shape[0]
        self.words = packed.view(_WORD)
        self.piece_rows = packed.view(_RowAssembler.piece_dtype)
        self.device = packed.device
        self.out_device = out_device
        self._span = (packed.data_ptr(), packed.data_ptr() + packed.numel())  # bytes, for aliases()
        self.views = [
            packed[:, offset : offset + dtype.itemsize * numel]
            .view(dtype)
            .view(self.capacity, *shape)
            for offset, dtype, numel, shape in zip(
                layout.offsets, layout.dtypes, layout.numels, layout.shapes, strict=True
            )
        ]
        self._shapes: dict[torch.Size, list[tuple[int, ...] | None]] = {}
        self._assembler = _RowAssembler(layout, self.device)
        self._serial_rows = _serial_rows(layout, packed)
        self._filled: tuple[int, torch.Tensor] | None = None
        # CPU only: CUDA's caching allocator already reuses memory, and knows streams.
        self._pool = _GatherPool(_WORD, self.device) if self.device.type == "cpu" else None

    # ----------------------------------------------------------------- read
    def read_index(self, index: torch.Tensor, filled: int | None = None) -> torch.Tensor:
        """Fresh copy of the rows at ``index`` (a 1-D LongTensor on any device).

        On CPU the copy lands in recycled memory (see ``_recycle``) that
        nothing else references. With ``filled``, only rows ``0 .. filled - 1``
        may be read: any other entry (negative ones included) raises
        ``IndexError``.
        """
        if index.device != self.device:
            index = index.to(self.device)
        source = self._source(filled)
        if self._pool is None or self.out_device is not None:
            rows = torch.index_select(source, 0, index)
            return rows if self.out_device is None else rows.to(self.out_device)
        out = self._pool.take((index.shape[0], source.shape[1]))
        return torch.index_select(source, 0, index, out=out)

    def read_index_into(
        self, index: torch.Tensor, filled: int, memory: torch.Tensor
    ) -> torch.Tensor | None:
        """The rows at ``index`` gathered into ``memory`` (a uint8 CPU tensor), as words.

        None when they cannot be: rows or memory off the CPU, ``memory`` too small
        or not word-aligned, an index that is not 1-D int64, or an entry outside
        rows ``0 .. filled - 1`` (the caller then reads the usual way, which
        reports it).
        """
        word = self.words.element_size()
        if (
            self.device.type != "cpu"
            or self.out_device is not None
            or memory.device.type != "cpu"
            or memory.dtype is not torch.uint8
            or index.dtype is not torch.int64
            or index.ndim != 1
            or memory.data_ptr() % word
        ):
            return None
        n, row_words = index.shape[0], self.words.shape[1]
        if n * row_words * word > memory.numel():
            return None
        out = memory[: n * row_words * word].view(_WORD).view(n, row_words)
        source = self._source(filled)
        try:
            return torch.index_select(source, 0, index, out=out)
        except IndexError:
            return None

    def read_leaves(self, index: torch.Tensor, filled: int | None = None) -> list[torch.Tensor]:
        """The leaves (``[len(index), *shape]`` views) of a fresh copy of the rows at ``index``.

        :meth:`read_index` then :meth:`split`; on CPU the copy lands in a
        recycled buffer whose leaf views are made once, and a batch's leaves
        are aliases of them (see ``_recycle``): no row is cut into leaves per batch.
        """
        pool = self._pool
        if pool is None or self.out_device is not None or not index.is_cpu:
            return self.split(self.read_index(index, filled), index.shape)
        source = self.words if filled is None or filled == self.capacity else self._source(filled)
        return pool.gather_leaves(source, index, self.split)

    def _source(self, filled: int | None) -> torch.Tensor:
        """The rows a read may see: all of them, or the first ``filled``."""
        if filled is None or filled == self.capacity:
            return self.words
        cached = self._filled
        if cached is None or cached[0] != filled:
            cached = self._filled = (filled, self.words[:filled])
        return cached[1]

    def read_range(self, start: int, stop: int) -> torch.Tensor:
        """Fresh copy of rows ``start .. stop - 1``."""
        rows = self.words[start:stop].clone()
        return rows if self.out_device is None else rows.to(self.out_device)

    def split(self, rows: torch.Tensor, batch: torch.Size) -> list[torch.Tensor]:
        """Per-leaf views ``[*batch, *shape]`` of ``rows`` (``[batch.numel(), row_words]``)."""
        shapes = self._shapes.get(batch)
        if shapes is None:
            flat = len(batch) == 1
            shapes = [
                None if flat and direct else (*batch, *shape)
                for direct, shape in zip(self.layout.direct, self.layout.shapes, strict=True)
            ]
            if len(self._shapes) >= _SHAPE_CACHE_SIZE:
                self._shapes.clear()
            self._shapes[batch] = shapes
        # not autograd views, which are cheaper to make: the rows never require grad
        pieces = [
            (rows if dt == _WORD else rows.view(dt)).unsafe_split_with_sizes(sizes, 1)
            for dt, sizes in self.layout.groups
        ]
        return [
            pieces[g][j] if shape is None else pieces[g][j].view(*shape or ((),))
            for (g, j), shape in zip(self.layout.pick, shapes, strict=True)
        ]

    # ---------------------------------------------------------------- write
    def aliases(self, leaves: list[torch.Tensor]) -> bool:
        """Whether one of ``leaves`` is a view of these rows."""
        lo, hi = self._span
        return any([lo <= t.data_ptr() < hi for t in leaves])  # a list: cheaper than a generator

    def unaliased(self, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
        """``leaves``, cloned if one of them is a view of these rows.

        A write reading the very rows it changes would otherwise read values it
        has already overwritten.
        """
        return [t.clone() for t in leaves] if self.aliases(leaves) else leaves

    def write_range(self, start: int, leaves: list[torch.Tensor]) -> None:
        """Copy ``leaves`` (each ``[n, *shape]``) into rows ``start .. start + n - 1``.

        Rows in shared memory are written by several processes at once: there
        a batch that torch would copy on all its intra-op threads is copied in
        chunks it copies on the calling thread (see ``_serial_rows``).
        """
        n = leaves[0].shape[0]
        step = self._serial_rows
        if step and n > step and torch.get_num_threads() > 1:
            for at in range(0, n, step):
                self._write_block(start + at, [t[at : at + step] for t in leaves])
        else:
            self._write_block(start, leaves)

    def _write_block(self, start: int, leaves: list[torch.Tensor]) -> None:
        stop = start + leaves[0].shape[0]
        if not self._assembler.write(leaves, self.piece_rows[start:stop]):
            torch._foreach_copy_([view[start:stop] for view in self.views], leaves)

    def assemble(self, leaves: list[torch.Tensor], n: int) -> torch.Tensor:
        """Whole rows (``[n, row_words]`` words) built from ``leaves`` with views and one ``cat``.

        No staged tensor is written in place, so ``torch.compile`` traces it (the
        unsafe split views the other write paths fill are not followed by its
        functionalization). Padding bytes are 0.
        """
        layout = self.layout
        pieces: list[torch.Tensor] = []
        at = 0
        for i in sorted(range(len(leaves)), key=layout.offsets.__getitem__):
            offset = layout.offsets[i]
            if offset > at:
                pieces.append(leaves[i].new_zeros((n, offset - at), dtype=torch.uint8))
            leaf = leaves[i].to(self.device).reshape(n, -1).contiguous()
            pieces.append(leaf.view(torch.uint8))
            at = offset + layout.dtypes[i].itemsize * layout.numels[i]
        if layout.row_bytes > at:
            pieces.append(leaves[0].new_zeros((n, layout.row_bytes - at), dtype=torch.uint8))
        return torch.cat(pieces, 1).view(_WORD)

    def write_index(self, index: torch.Tensor, leaves: list[torch.Tensor]) -> None:
        """Copy ``leaves`` (each ``[n, *shape]``) into the rows at ``index`` (1-D, length n)."""
        if index.device != self.device:
            index = index.to(self.device)
        n = index.shape[0]
        stage = torch.empty((n, self.layout.row_words), dtype=_WORD, device=self.device)
        if not self._assembler.write(leaves, stage.view(_RowAssembler.piece_dtype)):
            torch._foreach_copy_(self.split(stage, torch.Size([n])), leaves)
        self.words.index_copy_(0, index, stage)


def _serial_rows(layout: _PackedLayout, packed: torch.Tensor) -> int:
    """The most rows of ``packed`` one serial copy writes; 0 to let torch use its threads.

    torch copies a block of at least ``_GRAIN_SIZE`` elements on all its
    intra-op threads, which wait for each other at the end of every copy. In
    processes that share rows (``share()``), each writer's threads compete
    with the other writers' and the reader's for the cores, and those waits
    made four writers of Atari frames 8x slower than one. A block below the
    grain runs on the calling thread (a single row above it still runs on
    the threads). Rows are assembled as 4-byte pieces.
    """
    if packed.device.type != "cpu" or not packed.is_shared():
        return 0
    return max(1, (_GRAIN_SIZE - 1) // (2 * layout.row_words))
