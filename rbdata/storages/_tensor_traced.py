"""The traced write and read of a tensor storage under ``torch.compile`` (``compilable=True``).

:class:`~rbdata.TensorStorage` inherits them; ``Storage.set`` calls
``_set_traced`` while compiling (see ``_compile_hooks``).
"""

from __future__ import annotations

import abc
from typing import Any

import torch

from rbdata._component.compiling import not_traced

from ._base import _check_int
from ._tensor_rows import _TensorRows


class _TracedRows(_TensorRows):
    """Writes and reads of packed rows that dynamo traces (no per-leaf view is written).

    Examples:
        >>> from rbdata import LazyTensorStorage
        >>> issubclass(LazyTensorStorage, _TracedRows)
        True
    """

    @abc.abstractmethod
    def _leaves(self, data: Any, batched: bool) -> tuple[list[torch.Tensor], int]:
        """The leaves of ``data`` checked against the stored layout, and the item count."""

    def _set_traced(self, index: Any, data: Any) -> int | None:
        """A write ``torch.compile`` traces: an initialized storage, a tensor, slice or int index.

        The leaves are assembled into whole rows, then copied into the rows with one
        ``index_copy_`` (tensor) or ``copy_`` (slice, int) of their 8-byte words:
        the only mutation the graph makes of the storage (aot_autograd refuses
        writes through the per-leaf views, of other dtypes). A tensor index is
        not bounds-checked here (the check would depend on its values).
        """
        rows = self._rows_value
        if rows is None or self._meeting is not None:
            return None
        start: int | None = None
        if isinstance(index, torch.Tensor):
            if index.ndim != 1 or index.dtype is not torch.int64:
                return None
        elif type(index) is slice:
            start, stop = index.start or 0, index.stop
            if index.step not in (None, 1) or type(start) is not int or type(stop) is not int:
                return None
            if not 0 <= start <= stop <= self._capacity:
                raise IndexError(
                    f"set slice {start}:{stop} is out of range for capacity {self._capacity}."
                )
        elif type(index) is int:
            start = _check_int(index, self._len, self._capacity, "set")
        else:
            return None
        batched = type(index) is not int
        leaves, n = self._leaves(data, batched)
        count = n if batched else 1
        if start is not None and type(index) is slice and count != index.stop - start:
            raise ValueError(f"index selects {index.stop - start} item(s) but data holds {n}.")
        layout, cells = rows.layout, self._cells
        if cells != 1 or self.ndim > 1:
            leaves = [t.reshape(-1, *shape) for t, shape in zip(leaves, layout.shapes, strict=True)]
        elif not batched:
            leaves = [t.unsqueeze(0) for t in leaves]
        stage = rows.assemble(leaves, count * cells)
        if start is None:
            assert isinstance(index, torch.Tensor)
            rows.words.index_copy_(0, self._to_cells(index.to(rows.device)), stage)
        else:
            rows.words[start * cells : (start + count) * cells].copy_(stage)
        return count

    def _get_traced(self, index: Any) -> Any | None:
        """A read ``torch.compile`` traces (a 1-D int64 index, not bounds-checked), or None."""
        rows = self._rows_value
        if (
            rows is None
            or self._structure is None
            or not isinstance(index, torch.Tensor)
            or index.ndim != 1
            or index.dtype is not torch.int64
            or rows.out_device is not None
        ):
            return None
        picked = torch.index_select(rows.words, 0, index.to(rows.device))
        return self._structure.build(rows.split(picked, index.shape), index.shape, self._out_device)

    def _to_cells(self, index: torch.Tensor) -> torch.Tensor:
        if self._cells == 1:
            return index
        offsets = torch.arange(self._cells, device=index.device)
        return (index.unsqueeze(1) * self._cells + offsets).reshape(-1)

    @not_traced
    def _len_eagerly(self) -> int:
        """``len(self)`` outside the graph (a graph break), as torchrl's compilable storages do.

        Traced, the length is guarded as a constant: a function reading it recompiles
        at every write. Read eagerly, it comes back into the graph as a value dynamo
        makes dynamic after one change.
        """
        return self._len * self._cells
