"""Assembling whole packed rows from the leaves of a batch with one ``torch.cat``.

Copying each leaf into its columns of the packed rows is a strided copy per
leaf, and a leaf of a few bytes per item (an action, a reward, a done flag)
costs a loop step per row. Concatenating the leaves along their item
dimension into whole rows costs one call instead, and with one intra-op
thread (or a small batch) torch runs its serial ``cat`` kernel: one pass
over the rows, each row written once, front to back.

Every row is seen as 4-byte words (``float32`` bit patterns: ``cat`` moves
them, nothing computes on them). A leaf that is ``float32`` of shape
``[n, k]``, or large and word-aligned (viewed as words), is a piece of the
``cat`` as is; the other leaves are first copied (one ``_foreach_copy_``)
into zero-filled staging blocks, one per run of such leaves (a run holds one
element width above 4 bytes at most, so that its block can be viewed as it),
and those blocks are the pieces. Padding bytes sit in a staging block and
stay 0.
"""

from __future__ import annotations

import torch

from ._row_layout import _PackedLayout

_PIECE = torch.float32
_PIECE_BYTES = 4
#: leaves of at least this many bytes per item are never staged (no double copy)
_DIRECT_BYTES = 64
#: batches of at most this many items keep their staging blocks between calls
_CACHED_ROWS = 1 << 14
_CACHE_SIZE = 8


class _RowAssembler:
    """Writes batches of leaves into whole packed rows.

    Staging blocks are kept per batch size between calls; a call takes its
    block out of the cache while it uses it, so concurrent calls never share
    one (a second caller makes its own).

    Args:
        layout: the row layout.
        device: where the rows (and the staging blocks) live.
    """

    #: the dtype rows are assembled in (``out`` of :meth:`write`)
    piece_dtype = _PIECE

    def __init__(self, layout: _PackedLayout, device: torch.device) -> None:
        self.layout = layout
        self.device = device
        order = sorted(range(len(layout.dtypes)), key=lambda i: layout.offsets[i])
        # the pieces in row order: a leaf index i (used as is), ~i (the leaf viewed as
        # words) or None (the next staging run); runs: (first byte, bytes, staged leaves)
        self._plan: list[int | None] = []
        self._runs: list[tuple[int, int, list[int]]] = []
        run: list[int] = []
        start = 0
        for i in order:
            offset = layout.offsets[i]
            size = layout.numels[i] * layout.dtypes[i].itemsize
            if size == 0:
                continue
            aligned = offset % _PIECE_BYTES == 0 and size % _PIECE_BYTES == 0
            plain = layout.dtypes[i] == _PIECE and len(layout.shapes[i]) == 1
            if aligned and (plain or size >= _DIRECT_BYTES):
                if offset > start:
                    self._add_run(start, offset, run)
                    run = []
                self._plan.append(i if plain else ~i)
                start = offset + size
            else:
                itemsize = layout.dtypes[i].itemsize
                last = layout.dtypes[run[-1]].itemsize if run else itemsize
                if last != itemsize and max(last, itemsize) > _PIECE_BYTES:
                    # one block per width above 4 bytes: its rows stay aligned to it
                    self._add_run(start, offset, run)
                    run, start = [], offset
                run.append(i)
        if layout.row_bytes > start:
            self._add_run(start, layout.row_bytes, run)
        self._staged = [i for _, _, leaves in self._runs for i in leaves]
        self._cache: dict[int, tuple[list[int | torch.Tensor], list[torch.Tensor]]] = {}

    def _add_run(self, start: int, stop: int, leaves: list[int]) -> None:
        self._plan.append(None)
        self._runs.append((start, stop - start, leaves))

    def _stage(self, n: int) -> tuple[list[int | torch.Tensor], list[torch.Tensor]]:
        """The plan for ``n`` rows with fresh staging blocks, and the staged leaves' views."""
        layout = self.layout
        blocks, views = [], []
        for start, size, leaves in self._runs:
            block = torch.zeros((n, size), dtype=torch.uint8, device=self.device)
            blocks.append(block.view(_PIECE))
            for i in leaves:
                offset = layout.offsets[i] - start
                width = layout.numels[i] * layout.dtypes[i].itemsize
                view = block[:, offset : offset + width].view(layout.dtypes[i])
                views.append(view.view(n, *layout.shapes[i]))
        staged = iter(blocks)
        return [next(staged) if p is None else p for p in self._plan], views

    def write(self, leaves: list[torch.Tensor], out: torch.Tensor) -> bool:
        """Write ``leaves`` (each ``[n, *shape]``) as the rows ``out``.

        ``out`` is a contiguous block of rows viewed as ``piece_dtype``. Returns
        False when the leaves cannot be concatenated there (another device,
        memory shared with ``out``, a leaf requiring grad): the caller then
        copies them leaf by leaf.
        """
        if leaves[0].device != self.device:
            return False
        n = out.shape[0]
        staging = self._cache.pop(n, None)  # atomic: this call owns the blocks
        if staging is None:
            staging = self._stage(n)
        template, views = staging
        try:
            pieces = [
                p
                if isinstance(p, torch.Tensor)
                else (leaves[p] if p >= 0 else _words(leaves[~p], n))
                for p in template
            ]
            if views:
                torch._foreach_copy_(views, [leaves[i] for i in self._staged])
            torch.cat(pieces, 1, out=out)
        except RuntimeError:
            return False
        if n <= _CACHED_ROWS:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[n] = staging
        return True


def _words(leaf: torch.Tensor, n: int) -> torch.Tensor:
    """``leaf`` as ``[n, words]`` float32 bit patterns (a view when possible)."""
    flat = leaf.reshape(n, -1)
    return flat if flat.dtype == _PIECE else flat.view(_PIECE)
