"""A few int64 counters that every process working on a buffer sees (lengths, cursors).

torchrl keeps a storage's length and a writer's cursor and write count in
``multiprocessing.Value`` cells, so that a child forked or spawned with the
buffer writes where the parent sees it. :class:`SharedCounters` does the same:

- by default the cells are a ``multiprocessing`` ``RawArray`` (a shared
  heap): a forked child inherits them, a spawned child given the object as a
  ``Process`` argument receives them;
- after :meth:`SharedCounters.share` they are a shared-memory tensor, which
  ``torch.multiprocessing`` also sends through queues and pipes;
- pickled otherwise (``pickle.dumps``, ``copy.deepcopy``) they travel by
  value: the copy counts on its own.
"""

from __future__ import annotations

import ctypes
from multiprocessing import sharedctypes
from multiprocessing.context import get_spawning_popen
from typing import Any

import torch


def spawning() -> bool:
    """Whether what is being pickled goes to a child process being started (``Process`` args)."""
    return get_spawning_popen() is not None


class SharedCounters:
    """``n`` int64 cells, read and written by index, shared with child processes.

    Args:
        values: the initial values.

    Examples:
        >>> counters = SharedCounters([0, 5])
        >>> counters[0] += 3
        >>> counters[0], counters[1], counters.values()
        (3, 5, [3, 5])
    """

    __slots__ = ("_raw", "_tensor", "cells")

    def __init__(self, values: list[int]) -> None:
        self._tensor: torch.Tensor | None = None
        self._raw: Any = sharedctypes.RawArray(ctypes.c_int64, len(values))
        #: the cells as a memoryview of int64 (the fastest reads and writes from Python)
        self.cells = memoryview(self._raw).cast("B").cast("q")
        for i, value in enumerate(values):
            self.cells[i] = value

    def __getitem__(self, i: int) -> int:
        return self.cells[i]

    def __setitem__(self, i: int, value: int) -> None:
        self.cells[i] = value

    def values(self) -> list[int]:
        """Every cell's value."""
        return self.cells.tolist()

    @property
    def is_shared(self) -> bool:
        """Whether the cells are a shared-memory tensor (see :meth:`share`)."""
        return self._tensor is not None

    def share(self) -> None:
        """Move the cells to a shared-memory tensor (sent by handle through any mp channel)."""
        if self._tensor is None:
            self._adopt(torch.tensor(self.values(), dtype=torch.int64).share_memory_())

    def _adopt(self, tensor: torch.Tensor) -> None:
        self._tensor, self._raw = tensor, None
        over = (ctypes.c_int64 * tensor.numel()).from_address(tensor.data_ptr())
        self.cells = memoryview(over).cast("B").cast("q")

    def __getstate__(self) -> dict[str, Any]:
        if self._tensor is not None:
            return {"tensor": self._tensor}  # torch's pickler shares it; pickle copies it
        if spawning():
            return {"raw": self._raw}  # a spawned child maps the same heap
        return {"values": self.values()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._tensor = None
        raw = state.get("raw")
        if raw is not None:
            self._raw = raw
            self.cells = memoryview(raw).cast("B").cast("q")
            return
        tensor = state.get("tensor")
        if tensor is not None and tensor.is_shared():
            self._adopt(tensor)
            return
        values = tensor.tolist() if tensor is not None else state["values"]
        SharedCounters.__init__(self, values)
