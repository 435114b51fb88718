"""The Writer base class: which storage slots new data goes to, and slot generations."""

from __future__ import annotations

import abc
import os
from typing import Any

import torch
from tensordict import TensorDictBase, is_tensorclass
from torch.utils._pytree import tree_leaves, tree_map

from rbdata._component.checks import check_bool
from rbdata._component.state_file import read_state, write_state
from rbdata.sharing.counters import Counters, beside, component_counters, share_beside
from rbdata.storages import Storage

__all__ = ["Writer", "batch_len", "slice_batch"]

#: consecutive slots given to ``write_at`` are copied as slices when the runs average this
_RUN_ITEMS = 1024
#: the slots generations are first allocated for over an unbounded storage (a
#: ``ListStorage()``): the stamps grow with the slots written, as torchrl's do
_UNBOUNDED_START = 1024


def batch_len(data: Any) -> int:
    """Items in a batch (its leading dim).

    Raises:
        ValueError: if ``data`` has no leading dimension.
    """
    if isinstance(data, list):
        return len(data)
    if isinstance(data, torch.Tensor | TensorDictBase):
        shape = data.shape
    else:
        leaves = tree_leaves(data)
        if not leaves:
            raise ValueError(
                f"extend got {type(data).__name__} data holding no tensor: nothing to write."
            )
        shape = torch.as_tensor(leaves[0]).shape
    if not shape:
        raise ValueError(
            f"extend needs data with a leading batch dim (one entry per item), got shape "
            f"{list(shape)}; use add() for a single item."
        )
    return int(shape[0])


def slice_batch(data: Any, rows: slice) -> Any:
    """``rows`` of a batch: tensors, TensorDicts, tensorclasses, lists sliced; PyTrees leafwise."""
    if isinstance(data, torch.Tensor | TensorDictBase | list) or is_tensorclass(data):
        return data[rows]
    return tree_map(lambda leaf: leaf[rows], data)


class Writer(abc.ABC):
    """Base class of writers: the write cursor, the write count and slot generations.

    The base class owns the public ``add``/``extend`` (counting writes and
    stamping generations); a subclass picks the slots and writes the data in
    two hooks, ``_write_one(data) -> slot`` and ``_write_batch(data) -> slots``
    (``-1`` for an item it drops).

    With ``track_generations=True`` every slot carries a generation stamp: -1
    before its first write, then 0, 1, ... one more per write (emptying the
    buffer advances every written slot too). A handle ``(index, generation)``
    captured at sampling time therefore tells whether the slot still holds
    the same item (:meth:`generations_of`).

    Args:
        compilable: keep the counters as plain Python ints (always the case in
            rbdata; accepted as torchrl's argument).

    Keyword Args:
        track_generations: keep a per-slot generation stamp.

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, RoundRobinWriter
        >>> writer = RoundRobinWriter(track_generations=True)
        >>> writer.register_storage(LazyTensorStorage(3))
        >>> writer.extend(torch.arange(4)).tolist(), writer.write_count
        ([0, 1, 2, 0], 4)
        >>> writer.generations_of(torch.arange(3)).tolist()
        [1, 0, 0]
    """

    #: whether ``extend`` may drop items (their returned index is -1)
    drops_items: bool = False

    def __init__(self, compilable: bool = False, *, track_generations: bool = False) -> None:
        self._compilable = check_bool(compilable, "compilable")
        self._track_generations = check_bool(track_generations, "track_generations")
        self._storage: Storage | None = None
        # [cursor, write_count], seen by child processes (as torchrl's mp.Value cells);
        # compilable: a plain list torch.compile traces (as torchrl's plain ints)
        self._counters: Counters = component_counters([0, 0], compilable=self._compilable)
        # the stamps live on the storage (every writer of it advances them); kept here
        # until a storage is registered
        self._unattached_generation: torch.Tensor | None = None

    # ------------------------------------------------------------ counters
    @property
    def _cursor(self) -> int:
        return self._counters.cells[0]

    @_cursor.setter
    def _cursor(self, value: int) -> None:
        self._counters.cells[0] = value

    @property
    def _write_count(self) -> int:
        return self._counters.cells[1]

    @_write_count.setter
    def _write_count(self, value: int) -> None:
        self._counters.cells[1] = value

    @property
    def _generation(self) -> torch.Tensor | None:
        """The per-slot stamps: the storage's ``slot_generations`` once one is registered."""
        storage = self._storage
        if storage is None:
            return self._unattached_generation
        return storage.slot_generations

    @_generation.setter
    def _generation(self, value: torch.Tensor | None) -> None:
        if self._storage is None:
            self._unattached_generation = value
        else:
            self._storage.slot_generations = value

    @property
    def cursor(self) -> int:
        """The writer's position: the slot the next item goes to (round robin)."""
        return self._cursor

    @property
    def write_count(self) -> int:
        """Total number of items written through ``add`` and ``extend``."""
        return self._counters.cells[1]  # read on every draw: not through ``_write_count``

    @property
    def tracks_generations(self) -> bool:
        """Whether the writer stamps slots with generations (``track_generations=True``)."""
        return self._track_generations

    # ------------------------------------------------------------ storage
    def register_storage(self, storage: Storage) -> None:
        """Attach the storage this writer writes into."""
        pending, self._unattached_generation = self._generation, None
        self._storage = storage
        self._counters = beside(self._counters, storage.counters)
        if self.writes_in_ring_order:
            storage.follow_writes(self._newest_slot)
        if self._track_generations:
            slots = self._stamp_slots()
            current = self._generation
            if current is None or current.numel() != slots:
                fits = pending is not None and pending.numel() == slots
                self._generation = pending if fits else torch.full((slots,), -1, dtype=torch.long)

    @property
    def storage(self) -> Storage:
        """The storage registered with :meth:`register_storage`."""
        if self._storage is None:
            raise RuntimeError(
                f"{type(self).__name__} has no storage: call register_storage first."
            )
        return self._storage

    #: Whether items land in slot order from the cursor, wrapping (round robin).
    writes_in_ring_order: bool = False

    def _newest_slot(self) -> int:
        """The slot written last, for a ring writer (the one before the cursor)."""
        return (self._cursor - 1) % self._capacity()

    def _capacity(self) -> int:
        """Slots along the storage's first dim (items, for multi-dim storages)."""
        storage = self.storage
        return storage.max_size_along_dim0

    def share_memory_(self) -> Writer:
        """Move the cursor, counters and generations to shared memory (for child processes).

        The cursor and counters of a writer into a storage whose items stay in
        this process (a list storage) stay with them.
        """
        storage = self._storage
        share_beside(self._counters, None if storage is None else storage.counters)
        if self._generation is not None:
            self._generation.share_memory_()
        return self

    # ------------------------------------------------------------ generations
    def generations_of(self, index: int | torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The generation stamp of each slot of ``index`` (-1: never written or untracked).

        A stamp covers a whole item (a dim-0 slot): with a storage of ``ndim > 1``,
        coordinates (``[..., ndim]``, as ``extend`` returns them, or a tuple of
        per-dim tensors) are read by their dim-0 component. A 1-D tensor is
        always a batch of slots.

        Args:
            index: an int, an integer tensor of slots (any shape) or coordinates.

        Returns:
            int64 stamps shaped like ``index`` (like its dim-0 component for coordinates).
        """
        storage = self._storage
        if isinstance(index, tuple):
            index = index[0]
        elif (
            isinstance(index, torch.Tensor)
            and index.ndim >= 2
            and storage is not None
            and storage.ndim > 1
            and index.shape[-1] == storage.ndim
        ):
            index = index[..., 0]
        index = torch.as_tensor(index, dtype=torch.long)
        generation = self._generation if self._track_generations else None
        if generation is None or not generation.numel():
            return torch.full(index.shape, -1, dtype=torch.long, device=index.device)
        n = generation.numel()
        # the stamps live on the CPU; a device index (a CUDA buffer's sample) gets them there
        stamps = generation[index.clamp(0, n - 1).to(generation.device)].to(index.device)
        return torch.where((index >= 0) & (index < n), stamps, torch.full_like(stamps, -1))

    def _stamp_slots(self) -> int:
        """How many slots the stamps cover: every slot, or (unbounded storage) a first few."""
        capacity = self._capacity()
        if capacity <= 1 << 31:
            return capacity
        return max(_UNBOUNDED_START, len(self.storage))

    def _stamp(self, index: torch.Tensor | int) -> None:
        generation = self._generation
        if generation is None:
            return
        top = int(index.max()) if isinstance(index, torch.Tensor) and index.numel() else -1
        top = max(top, index if isinstance(index, int) else -1)
        if top >= generation.numel():  # an unbounded storage: the stamps grow (never-written: -1)
            grown = torch.full((max(2 * generation.numel(), top + 1),), -1, dtype=torch.long)
            grown[: generation.numel()] = generation
            self._generation = generation = grown
        if isinstance(index, torch.Tensor):  # repeated slots count once per write
            generation.index_add_(0, index, torch.ones_like(index))
        else:
            generation[index] += 1

    # ------------------------------------------------------------ writing
    def add(self, data: Any) -> int:
        """Write one item; return its slot (-1 if the writer dropped it)."""
        index = self._write_one(data)
        if index >= 0:
            self._stamp(index)
            self._write_count += 1
        return index

    def extend(self, data: Any) -> torch.Tensor:
        """Write a batch of items; return their slots in data order (-1 for dropped items)."""
        index = self._write_batch(data)
        written = index[index >= 0] if self.drops_items else index
        if written.numel():
            self._stamp(written)
            self._write_count += int(written.numel())
        return index

    @property
    def counters(self) -> Counters:
        """The cells ``[cursor, write count]`` (:mod:`rbdata.sharing` reserves rows on them)."""
        return self._counters

    def write_at(self, index: torch.Tensor, data: Any) -> torch.Tensor:
        """Write a batch at the explicit slots ``index`` without moving the cursor.

        Used to reuse the slots of consumed items (``consume_after_n_samples``):
        the sampler hands out consumed slots in ring order from its reuse
        position (the slot after the last consumed slot written again),
        skipping live ones, so after a drain a batch takes one run of slots
        (two at the wrap point). Runs of consecutive slots are written as
        slice copies, as at the cursor; scattered slots in one indexed write.
        The slots' generations advance, so handles captured before are stale.

        Raises:
            KeyError, TypeError, ValueError: if ``data`` does not fit the
                storage; nothing is written then.
        """
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        if index.numel():
            runs = self._runs(index)
            if runs is None:
                self.storage.set(index, data)
            else:
                self._write_runs(runs, data)
            self._stamp(index)
            self._write_count += int(index.numel())
        return index

    def _runs(self, index: torch.Tensor) -> list[tuple[int, int]] | None:
        """``index`` as runs ``(first slot, items)`` of consecutive slots; None: scatter it.

        Several runs are worth it on a CPU storage of one dim when they are long
        (a thousand items on average: each is a write of its own).
        """
        storage = self.storage
        n = index.numel()
        if n < 2 * _RUN_ITEMS or storage.ndim != 1 or index.device.type != "cpu":
            return None  # one run at most: the storage writes a run of slots as a slice
        breaks = torch.nonzero(index[1:] - index[:-1] != 1).reshape(-1)
        if breaks.numel() + 1 > 1 + n // _RUN_ITEMS:
            return None
        starts = [0, *(breaks + 1).tolist()]
        stops = [*starts[1:], n]
        firsts = index[starts].tolist()
        return [(f, stop - start) for f, start, stop in zip(firsts, starts, stops, strict=True)]

    def _write_runs(self, runs: list[tuple[int, int]], data: Any) -> None:
        """Write ``data`` over ``runs`` (of :meth:`_runs`), one slice copy each; all or nothing."""
        storage = self.storage
        if len(runs) == 1:
            first, items = runs[0]
            storage.set(slice(first, first + items), data)
            return
        storage.validate(data, True)  # every run or none
        if storage.reads_own_memory(data):  # an early run would change what a later one reads
            data = tree_map(torch.clone, data)
        at = 0
        for first, items in runs:
            storage.set(slice(first, first + items), slice_batch(data, slice(at, at + items)))
            at += items

    @abc.abstractmethod
    def _write_one(self, data: Any) -> int:
        """Pick the slot of one item and write it there; return the slot (or -1)."""

    @abc.abstractmethod
    def _write_batch(self, data: Any) -> torch.Tensor:
        """Pick the slots of a batch and write it; return the slots (-1: dropped)."""

    def _empty(self, empty_write_count: bool = True) -> None:
        """Forget the written data: cursor to 0, stamps of written slots advanced."""
        self._cursor = 0
        if self._generation is not None:
            written = self._generation >= 0
            self._generation[written] += 1
        if empty_write_count:
            self._write_count = 0

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The cursor, the write count and (when tracked) a copy of the generations."""
        state: dict[str, Any] = {"_cursor": self._cursor, "_write_count": self._write_count}
        if self._generation is not None and self._track_generations:
            state["_generation"] = self._generation.clone()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; missing entries are kept.

        Raises:
            ValueError: if the saved generations do not have one stamp per slot
                (nothing is changed then).
        """
        generation = state_dict.get("_generation")
        current = self._generation
        grows = self._storage is not None and self._stamp_slots() != self._capacity()
        if grows and generation is not None and current is not None:
            current = None  # an unbounded storage: the saved stamps replace these, any length
        if generation is not None and current is not None and generation.shape != current.shape:
            raise ValueError(
                f"writer generations have shape {tuple(generation.shape)}, expected "
                f"{tuple(current.shape)} (one per storage slot)."
            )
        self._cursor = int(state_dict.get("_cursor", self._cursor))
        self._write_count = int(state_dict.get("_write_count", self._write_count))
        if generation is not None:
            if self._generation is None or current is None:
                self._generation = generation.clone()
            else:
                self._generation.copy_(generation)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save :meth:`state_dict` in the directory ``path``."""
        write_state(self.state_dict(), path, "writer")

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Load a state saved with :meth:`dumps` (read with ``weights_only=True``)."""
        self.load_state_dict(read_state(path, "writer"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(cursor={self._cursor}, write_count={self._write_count})"
