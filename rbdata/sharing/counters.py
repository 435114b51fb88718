"""The counters of a buffer's components (lengths, cursors, write counts), seen by every process.

The storage's length, revision and last slot and the writer's cursor and
write count are cells owned here: a component asks :func:`component_counters`
for its cells and reads and writes them by index; whether they are shared,
process-local or traced by ``torch.compile`` is decided here.

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
from typing import Any, cast

import torch


def component_counters(
    values: list[int],
    *,
    compilable: bool = False,
    process_local: bool = False,
    tensors: tuple[int, ...] = (),
) -> SharedCounters:
    """The cells of a component's counters, initialized to ``values``.

    Args:
        values: the initial values.
        compilable: cells ``torch.compile`` traces (a plain list; ``tensors`` as 0-d tensors).
        process_local: cells that stay in this process even when the buffer is shared
            (the counters of items that live in this process only, a list storage's).
        tensors: with ``compilable``, the cells kept as 0-d tensors.

    Examples:
        >>> component_counters([0, 0]).is_shared
        False
        >>> component_counters([0], process_local=True).process_local
        True
    """
    if compilable:
        return LocalCounters(values, tensors=tensors)
    if process_local:
        return LocalCounters(values, process_local=True)
    return SharedCounters(values)


def beside(counters: SharedCounters, storage: SharedCounters) -> SharedCounters:
    """``counters`` (a writer's) kept where ``storage``'s counters are: process-local with them.

    A writer into a storage whose items stay in this process keeps its cursor
    and count there too, or a forked child's writes would move them past this
    process's items.
    """
    if storage.process_local and not counters.process_local:
        return LocalCounters(counters.values(), process_local=True)
    return counters


def share_beside(counters: SharedCounters, storage: SharedCounters | None) -> None:
    """Share ``counters`` (a writer's) unless the storage's stay in this process."""
    if storage is None or not storage.process_local:
        counters.share()


def count_written(cells: list[int], stop: int, last: int | None) -> None:
    """A storage's write ending at ``stop`` (its last slot ``last``): revision, length, last slot.

    The storage's cells are ``[filled items, mutation revision, last slot written]``.

    Examples:
        >>> cells = [2, 0, 1]
        >>> count_written(cells, 5, 4)
        >>> cells
        [5, 1, 4]
    """
    cells[1] += 1
    if stop > cells[0]:
        cells[0] = stop
    if last is not None:
        cells[2] = last


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

    #: whether the cells stay in this process whatever is shared (see :func:`component_counters`)
    process_local = False

    def __init__(self, values: list[int]) -> None:
        self._tensor: torch.Tensor | None = None
        self._raw: Any = sharedctypes.RawArray(ctypes.c_int64, len(values))
        #: the cells as a memoryview of int64 (the fastest reads and writes from Python);
        #: a list in :class:`LocalCounters` (typed as a list of ints: both index the same way)
        self.cells = cast("list[int]", memoryview(self._raw).cast("B").cast("q"))
        for i, value in enumerate(values):
            self.cells[i] = value

    def __getitem__(self, i: int) -> int:
        return self.cells[i]

    def __setitem__(self, i: int, value: int) -> None:
        self.cells[i] = value

    def values(self) -> list[int]:
        """Every cell's value."""
        return list(self.cells)

    @property
    def is_shared(self) -> bool:
        """Whether the cells are a shared-memory tensor (see :meth:`share`)."""
        return self._tensor is not None

    @property
    def tensor(self) -> torch.Tensor | None:
        """The cells' shared-memory tensor (None before :meth:`share`); it views the cells."""
        return self._tensor

    def share(self) -> None:
        """Move the cells to a shared-memory tensor (sent by handle through any mp channel)."""
        if self._tensor is None:
            self._adopt(torch.tensor(self.values(), dtype=torch.int64).share_memory_())

    def _adopt(self, tensor: torch.Tensor) -> None:
        self._tensor, self._raw = tensor, None
        over = (ctypes.c_int64 * tensor.numel()).from_address(tensor.data_ptr())
        self.cells = cast("list[int]", memoryview(over).cast("B").cast("q"))

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
            self.cells = cast("list[int]", memoryview(raw).cast("B").cast("q"))
            return
        tensor = state.get("tensor")
        if tensor is not None and tensor.is_shared():
            self._adopt(tensor)
            return
        values = tensor.tolist() if tensor is not None else state["values"]
        SharedCounters.__init__(self, values)


class LocalCounters(SharedCounters):
    """:class:`SharedCounters` in a plain list until :meth:`share`, which ``torch.compile`` reads.

    ``compilable=True`` storages and writers count here, as torchrl keeps their
    counters in plain attributes: dynamo traces reads and writes of list cells
    (it cannot subscript the memoryview of shared cells). The cells named in
    ``tensors`` hold 0-d int64 tensors, which a compiled graph bumps without
    guarding on their value (a counter that changes on every call would
    otherwise make it recompile). A child process started with the object gets
    a copy; after :meth:`share` the cells are shared, as :class:`SharedCounters`'s
    are (and no longer traced).

    Args:
        values: the initial values.
        tensors: the indices of the cells kept as 0-d tensors.

    Examples:
        >>> counters = LocalCounters([0, 5], tensors=(1,))
        >>> counters[0] += 3
        >>> counters.cells[1] += 1
        >>> counters.values()
        [3, 6]
    """

    __slots__ = ("_tensors", "process_local")

    def __init__(
        self, values: list[int], tensors: tuple[int, ...] = (), *, process_local: bool = False
    ) -> None:
        self.process_local = process_local
        self._tensor = None
        self._raw = None
        self._tensors = tensors
        cells: list[Any] = list(values)
        for i in tensors:
            cells[i] = torch.tensor(cells[i], dtype=torch.int64)
        self.cells = cells  # ints, and 0-d tensors at ``tensors``

    def __getitem__(self, i: int) -> int:
        return int(self.cells[i])

    def values(self) -> list[int]:
        """Every cell's value (a cell set under ``torch.compile`` may hold a 0-d tensor)."""
        return [int(v) for v in self.cells]

    def __getstate__(self) -> dict[str, Any]:
        if self._tensor is not None:
            return {"tensor": self._tensor}
        return {
            "values": self.values(),
            "tensors": self._tensors,
            "process_local": self.process_local,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        tensor = state.get("tensor")
        if tensor is not None and tensor.is_shared():
            self._raw, self._tensors, self.process_local = None, (), False
            self._adopt(tensor)
            return
        values = tensor.tolist() if tensor is not None else state["values"]
        LocalCounters.__init__(
            self,
            values,
            tuple(state.get("tensors", ())),
            process_local=bool(state.get("process_local", False)),
        )


#: the type of a component's counters (:func:`component_counters`): shared or local cells
Counters = SharedCounters
