"""The Storage base class (where the buffer's items live) and index normalization."""

from __future__ import annotations

import abc
import operator
import os
from collections.abc import Callable
from typing import Any, overload

import torch

from rbdata._component.checks import check_bool, check_int
from rbdata._component.state_file import read_state, write_state
from rbdata.sharing.counters import Counters, component_counters, count_written

from ._compile_hooks import _CompileHooks
from .checkpointers.base import StorageCheckpointerBase

Index = int | slice | torch.Tensor


def _identity(data: Any) -> Any:
    return data


class Storage(_CompileHooks, abc.ABC):
    """Base class of every storage.

    A storage holds up to ``max_size`` items in slots ``0 .. max_size - 1``.
    Writers decide *where* to write (``set``), samplers decide *what* to read
    (``get``). ``len(storage)`` is the number of filled slots: slots
    ``0 .. len - 1`` always hold data (writers fill slots in order).

    Index kinds, for ``get`` and ``set``: an int (one item; negative ints count
    from the end of the filled part, as in Python), a slice, or an integer
    tensor (one item per element; ``get`` also accepts an N-d tensor and
    returns a batch of that shape). Out-of-range indices raise ``IndexError``
    naming the index and the valid range.

    Subclasses implement ``_set`` (which validates, writes and returns the new
    filled length it implies), ``_get``, ``_empty`` and the state hooks; this
    base owns the public API, the length bookkeeping and the save/load hooks.

    Args:
        max_size: number of slots.
        compilable: keep the bookkeeping friendly to ``torch.compile`` (plain
            Python ints and tensors; rbdata's storages always are, so this only
            records the choice, as torchrl's argument of that name).

    Examples:
        >>> import torch
        >>> from rbdata.storages import ListStorage
        >>> storage = ListStorage(max_size=10)
        >>> storage.set(torch.arange(3), ["a", "b", "c"])
        >>> len(storage), storage[-1], storage.get(torch.tensor([2, 0]))
        (3, 'c', ['c', 'a'])
    """

    ndim: int = 1
    #: the writer's per-slot generation stamps (``track_generations``), kept with the
    #: rows so that every writer of this storage advances the same stamps (None: none)
    slot_generations: torch.Tensor | None = None

    #: the checkpointer torchrl gives this kind of storage (what ``checkpointer`` reads unset)
    _default_checkpointer: type[StorageCheckpointerBase] = StorageCheckpointerBase
    _checkpointer: StorageCheckpointerBase | None = None

    def __init__(
        self,
        max_size: int,
        *,
        checkpointer: StorageCheckpointerBase | None = None,
        compilable: bool = False,
    ) -> None:
        self.max_size = check_int(max_size, "max_size", minimum=1)
        self.checkpointer = checkpointer
        self._compilable = check_bool(compilable, "compilable")
        # [filled items, mutation revision, last slot written]: seen by child processes;
        # compilable: a plain list torch.compile traces (as torchrl's plain attributes)
        # the revision of compiled counters is a 0-d tensor: bumped without a guard
        self._counters: Counters = component_counters(
            [0, 0, -1], compilable=self._compilable, tensors=(1,)
        )
        self._save_hooks: list[Callable[..., Any]] = []
        self._load_hooks: list[Callable[..., Any]] = []
        self._newest_of: Callable[[], int] | None = None

    # -------------------------------------------------------------- length
    @property
    def _len(self) -> int:
        """Filled items along the first storage dim (shared with child processes)."""
        return self._counters.cells[0]

    @_len.setter
    def _len(self, value: int) -> None:
        self._counters.cells[0] = value

    @property
    def _mutation_revision(self) -> int:
        """How many times the content changed (writes, ``empty()``); children's writes count."""
        return self._counters[1]

    @property
    def revision(self) -> int:
        """How many times the content changed (writes, edits, ``empty()``, other processes').

        A cache built from the content (a sampler's index of it) is stale once this moves.
        """
        return int(self._mutation_revision)

    @property
    def _last_cursor_index(self) -> int | None:
        """The slot (along the first dim) of the last item written, None before any."""
        last = self._counters[2]
        if type(last) is not int:  # a 0-d tensor, set by a write under torch.compile
            last = int(last)
        return None if last < 0 else last

    def _note_mutation(self, last: int | None = None) -> None:
        cells = self._counters.cells
        cells[1] += 1
        if last is not None:
            cells[2] = last

    def __len__(self) -> int:
        return self._len

    def contains(self, item: int | torch.Tensor) -> bool | torch.Tensor:
        """Whether slot ``item`` (along the first dim) holds an item (torchrl's ``contains``).

        Args:
            item: an int (negative ones count from the end of the filled
                slots) or an integer tensor of slots.

        Returns:
            a bool for an int; a bool tensor of ``item``'s shape for a tensor.

        Raises:
            TypeError: for another kind of ``item``.

        Examples:
            >>> import torch
            >>> from rbdata import ListStorage
            >>> storage = ListStorage(10)
            >>> storage.set(range(3), [1, 2, 3])
            >>> storage.contains(2), storage.contains(3), storage.contains(-1)
            (True, False, True)
            >>> storage.contains(torch.tensor([0, 5]))
            tensor([ True, False])
        """
        if isinstance(item, torch.Tensor):
            if item.dtype.is_floating_point or item.dtype.is_complex or item.dtype == torch.bool:
                raise TypeError(f"item must hold integers, got a tensor of dtype {item.dtype}.")
            flat = [bool(self.contains(int(i))) for i in item.reshape(-1).tolist()]
            return torch.tensor(flat, dtype=torch.bool, device=item.device).reshape(item.shape)
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"item must be an int or an integer tensor, got {type(item).__name__}.")
        filled = self._len
        if item < 0:
            item += filled
        return 0 <= item < filled and self._holds(item)

    def _holds(self, slot: int) -> bool:
        """Whether the filled slot ``slot`` holds an item (a storage with holes overrides it)."""
        return True

    # ----------------------------------------------------------- write order
    def follow_writes(self, newest: Callable[[], int] | None) -> None:
        """Let the storage tell which slot was written last (a ring writer registers here).

        Readers of a full ring (a :class:`~rbdata.Sequence` unit that was not
        told about the buffer's writes) need the write seam: the newest slot,
        with the oldest right after it.

        Args:
            newest: returns the slot (along the first dim) written last; None
                forgets it (slot order is then the write order).
        """
        self._newest_of = newest

    @property
    def newest_slot(self) -> int | None:
        """The slot (along the first dim) written last; None when no ring writer reports it."""
        newest = self._newest_of
        return None if newest is None or not self._len else newest()

    # ------------------------------------------------------------------ API
    @property
    @abc.abstractmethod
    def initialized(self) -> bool:
        """Whether the storage has allocated its slots (lazy storages: after the first write)."""

    def accepts_max_size(self, max_size: int, lead: Any = None) -> bool:
        """Whether a dump of a storage of ``max_size`` fits this one (``loads`` asks).

        Equal sizes; a lazy ``ndim > 1`` storage not laid out yet also takes the
        size its own ``max_size`` rounds up to for items of the dump's ``lead``
        shape (the dims after the first, a list of ints).
        """
        return max_size == self.max_size

    @property
    def max_size_along_dim0(self) -> int:
        """Capacity in items along dim 0, where writers wrap around (``max_size`` here)."""
        return self.max_size

    def validate(self, data: Any, batched: bool) -> None:  # noqa: B027 (a hook: accepts all)
        """Check ``data`` before a write; raise KeyError/TypeError/ValueError if it cannot go in.

        This storage accepts everything; storages with a fixed layout override it.

        Args:
            data: a batch (``batched=True``: leading dim = number of items) or one item.
            batched: whether ``data`` is a batch.
        """

    def share_memory_(self) -> Storage:
        """Move the items to shared memory, for ``torch.multiprocessing`` (``shared=True``).

        Tensor storages do; this base keeps its items where they are (torchrl's
        ``shared=True`` accepts any storage): a storage of Python objects refuses
        instead to be sent to a child process being started (``RuntimeError``).

        Returns:
            the storage itself.
        """
        return self

    def set(self, index: Index, data: Any, *, set_cursor: bool = True) -> None:
        """Write ``data`` at ``index`` (an int, a slice or a 1-D LongTensor).

        For an int ``index`` ``data`` is one item; otherwise ``data`` holds one
        item per index along its first dimension. Validation happens before
        anything is written: on error the storage is unchanged.

        Args:
            index: where to write.
            data: what to write.
            set_cursor: whether the write counts as filling slots (``len`` and the
                last written slot follow it). False (torchrl's keyword) writes the
                content only, as an in-place edit of slots that are already counted
                or a pre-fill of slots a later write will count.
        """
        if self._compilable and torch.compiler.is_compiling():
            self._set_compiling(index, data, set_cursor)
            return
        stop = self._set(index, data)
        if set_cursor:
            self._count_written(stop, _last_slot(index, stop))
        else:
            self.note_edit()

    def _count_written(self, stop: int, last: int | None) -> None:
        """A write ending at ``stop`` (its last slot ``last``): revision, length, last slot."""
        count_written(self._counters.cells, stop, last)

    @property
    def counters(self) -> Counters:
        """The cells ``[filled items, mutation revision, last slot]`` (:mod:`rbdata.sharing`)."""
        return self._counters

    def batch_leaves(self, data: Any) -> list[torch.Tensor] | None:
        """The checked leaves of the batch ``data``, one per row field (None: not laid out so).

        Tensor storages laid out in rows (1-D, initialized) give them for a
        batch of at most ``max_size`` items that reads none of their own
        memory (:meth:`write_leaves` copies them); this base never does.

        Raises:
            KeyError, TypeError, ValueError: if ``data`` does not fit the storage.
        """
        return None

    def write_leaves(self, start: int, leaves: list[torch.Tensor]) -> None:
        """Copy :meth:`batch_leaves`' ``leaves`` into rows ``start ..`` (counters unchanged).

        Raises:
            NotImplementedError: for a storage not laid out in rows.
        """
        raise NotImplementedError(f"{type(self).__name__} is not laid out in rows")

    def get(self, index: Index) -> Any:
        """Read the items at ``index`` (an int, a slice or an integer tensor).

        A tensor storage with ``ndim > 1`` also takes a tuple of ``ndim``
        coordinates (ints or integer tensors, as torchrl's), read as the cells they name.
        """
        return self._get(index)

    def read_into(self, index: torch.Tensor, memory: torch.Tensor) -> Any | None:
        """``get(index)`` with the items' bytes read into ``memory`` (a uint8 tensor).

        The data returned views ``memory``; None when this storage cannot read
        into caller memory (the caller then calls :meth:`get`). The base class
        never can; tensor storages on CPU can, for a 1-D int64 ``index``.
        """
        return None

    def __getitem__(self, index: Index) -> Any:
        return self.get(index)

    def __setitem__(self, index: Index, data: Any) -> None:
        self.set(index, data)

    def note_edit(self) -> None:
        """Count an in-place change of stored items: :attr:`revision` moves, nothing else.

        The buffer calls it for the edits that write leaves directly (``set_``,
        ``set_at_``, ``update_``, ``update_if_present``) and after a state is loaded.
        """
        self._counters.cells[1] += 1

    def empty(self) -> None:
        """Forget every item (slots are kept allocated)."""
        self._empty()
        self._len = 0
        self._note_mutation()

    def register_save_hook(self, hook: Callable[..., Any]) -> None:
        """Register a callable applied to the content before it is saved by ``dumps``.

        With a checkpointer set, the hook goes to the checkpointer (as torchrl's).
        """
        if self._checkpointer is not None:
            self._checkpointer.register_save_hook(hook)
            return
        self._save_hooks.append(hook)

    def register_load_hook(self, hook: Callable[..., Any]) -> None:
        """Register a callable applied to the content after it is read by ``loads``.

        With a checkpointer set, the hook goes to the checkpointer (as torchrl's).
        """
        if self._checkpointer is not None:
            self._checkpointer.register_load_hook(hook)
            return
        self._load_hooks.append(hook)

    @property
    def checkpointer(self) -> StorageCheckpointerBase:
        """How :meth:`dumps`/:meth:`loads` lay the storage out once set (torchrl's checkpointers).

        Unset, it reads as the checkpointer torchrl gives this kind of storage,
        but :meth:`dumps` keeps rbdata's own format; assigning one (or a
        buffer's ``checkpointer=``) routes :meth:`dumps`/:meth:`loads` and the
        hooks registered afterwards through it. None unsets it.
        """
        return self._checkpointer or self._default_checkpointer()

    @checkpointer.setter
    def checkpointer(self, value: StorageCheckpointerBase | None) -> None:
        if value is not None and not isinstance(value, StorageCheckpointerBase):
            raise TypeError(
                "checkpointer must be a StorageCheckpointerBase or None, got "
                f"{type(value).__name__}."
            )
        self._checkpointer = value

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save the storage in the directory ``path`` (its checkpointer's layout, if one is set).

        Without a checkpointer: :meth:`state_dict` (content included), read back
        with ``weights_only=True``.
        """
        if self._checkpointer is not None:
            self._checkpointer.dumps(self, path)
            return
        write_state(self.apply_save_hooks(self.state_dict(), path), path, "storage")

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Load a storage saved with :meth:`dumps` (through the same checkpointer, if set).

        Raises:
            FileNotFoundError: if ``path`` holds no saved storage.
        """
        if self._checkpointer is not None:
            self._checkpointer.loads(self, path)
            self._note_mutation()
            return
        self.load_state_dict(self.apply_load_hooks(read_state(path, "storage")))

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`loads`."""
        self.loads(path)

    def apply_save_hooks(
        self, state: dict[str, Any], path: str | os.PathLike[str] | None = None
    ) -> dict[str, Any]:
        """``state`` (a :meth:`state_dict`) passed through the save hooks, in order.

        Each hook is called as ``hook(state, path=path)`` (torchrl's call), ``path``
        being the directory the dump goes to.

        As torchrl's checkpointers do, a hook with an ``is_full`` attribute has it
        set to whether the storage is full, and one with a ``shift`` attribute to
        the slot after the last one written (0 before any write), before it runs.
        """
        if self._save_hooks:
            last = self._last_cursor_index
            is_full, shift = len(self) == self.max_size, 0 if last is None else last + 1
            for hook in self._save_hooks:
                if hasattr(hook, "is_full"):
                    hook.is_full = is_full
                if hasattr(hook, "shift"):
                    hook.shift = shift
        for hook in self._save_hooks:
            state = hook(state, path=path)
        return state

    def apply_load_hooks(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` read back from a dump passed through the load hooks, in order.

        Each hook is called as ``hook(state, out=None)`` (torchrl's call; rbdata reads
        the dump into a new state, never into a destination given to the hook).
        """
        for hook in self._load_hooks:
            state = hook(state, out=None)
        return state

    # ------------------------------------------------- what the buffer asks
    def default_collate_fn(self) -> Callable[[Any], Any]:
        """How a buffer merges what :meth:`get` returns for several items (default: as is)."""
        return _identity

    def as_batch(self, data: Any, dim: int) -> Any:
        """``data`` given to ``extend`` as a batch this storage writes (items along dim 0).

        Args:
            data: the batch as the user gave it.
            dim: the dimension the items run along (the buffer's ``dim_extend``).
        """
        return data

    def item_as_batch(self, item: Any) -> Any | None:
        """``item`` given to ``add`` as a batch of one, or None to write it as one item."""
        return None

    def memory_stats(self) -> dict[str, int]:
        """What the items cost in memory: ``capacity_bytes``, ``resident_bytes`` where known.

        ``stats()`` of a buffer reports these. The base reports nothing (a list
        of objects has no fixed row size).
        """
        return {}

    def reads_own_memory(self, data: Any) -> bool:
        """Whether ``data`` is a view of this storage's memory (writes must copy it first).

        Writers ask before a write split into runs: a later run must not read what an
        earlier one overwrote. The base holds no memory of its own: False.
        """
        return False

    # ------------------------------------------------------- tensor layout
    @property
    def device(self) -> torch.device | None:
        """The device of the items; None for a storage of Python objects (no one device)."""
        return None

    @property
    def shape(self) -> torch.Size:
        """``[max_size]``: the slots along one dim (tensor storages add their lead dims)."""
        return torch.Size([self.max_size])

    @property
    def has_tensordict_leaves(self) -> bool:
        """Whether the items are TensorDicts laid out as leaves (:meth:`get_leaf` reads them).

        False here (not a tensor storage: read the items with :meth:`get`).
        """
        return False

    def leaf_keys(self) -> list[Any]:
        """The stored leaf keys (``"obs"``, ``("next", "obs")``); none in this base."""
        return []

    def get_leaf(self, key: Any) -> torch.Tensor:
        """A writable view ``[capacity, *shape]`` of the leaf ``key`` over the whole storage.

        Raises:
            NotImplementedError: for a storage not laid out in leaves (this base).
        """
        raise NotImplementedError(f"{type(self).__name__} is not laid out in leaves")

    # -------------------------------------------------------------- hooks
    @abc.abstractmethod
    def _set(self, index: Index, data: Any) -> int:
        """Validate and write; return the filled length (along dim 0) the write implies."""

    @abc.abstractmethod
    def _get(self, index: Index) -> Any: ...

    @abc.abstractmethod
    def _empty(self) -> None: ...

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Return the storage's state, content included (tensors, not pickled objects)."""

    @abc.abstractmethod
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the storage from :meth:`state_dict`'s output."""


# ------------------------------------------------------------ index helpers
def _last_slot(index: Index, stop: int) -> int | None:
    """The slot a write at ``index`` ended on (its last element), None when unknown."""
    if type(index) is slice:  # the writers' case first
        end = index.stop
        return end - 1 if type(end) is int and end > 0 and index.step in (None, 1) else None
    if type(index) is int:
        return index
    if isinstance(index, torch.Tensor) and index.numel():
        return int(index.reshape(-1)[-1])
    return None


def _as_index(index: Any) -> int | slice | torch.Tensor:
    """Bring the accepted index kinds to an int, a slice or an int64 tensor."""
    if type(index) is torch.Tensor:
        if index.dtype is not torch.int64:
            if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype is torch.bool:
                raise TypeError(f"index tensors must hold integers, got dtype {index.dtype}.")
            index = index.long()
        return int(index) if index.ndim == 0 else index
    if isinstance(index, slice):
        return index
    if isinstance(index, bool):
        raise TypeError(f"index must be an int, a slice or an integer tensor, got {index!r}.")
    if isinstance(index, (list, tuple, range)):
        return _as_index(torch.as_tensor(index, dtype=torch.int64))
    if isinstance(index, torch.Tensor):
        return _as_index(index.as_subclass(torch.Tensor))
    try:
        return operator.index(index)
    except TypeError:
        raise TypeError(
            f"index must be an int, a slice or an integer tensor, got {type(index).__name__}."
        ) from None


def _check_int(index: int, length: int, bound: int, what: str) -> int:
    """Resolve a negative int against ``length`` and check ``0 <= index < bound``."""
    resolved = index + length if index < 0 else index
    if not 0 <= resolved < bound:
        raise IndexError(
            f"{what} index {index} is out of range: valid indices are "
            f"{-length} .. {bound - 1} (length {length}, capacity {bound})."
        )
    return resolved


def _check_tensor(
    index: torch.Tensor, length: int, bound: int, what: str
) -> tuple[torch.Tensor, int]:
    """Resolve negative entries against ``length``, check every entry is below ``bound``.

    Returns the resolved index and its largest non-negative entry (-1 if none).
    """
    if index.numel() == 0:
        return index, -1
    lo, hi = (int(v) for v in torch.aminmax(index))
    if lo < -length or hi >= bound:
        bad = lo if lo < -length else hi
        raise IndexError(
            f"{what} index {bad} is out of range: valid indices are "
            f"{-length} .. {bound - 1} (length {length}, capacity {bound})."
        )
    if lo < 0:
        index = torch.where(index < 0, index + length, index)
    return index, hi


@overload
def _get_index(index: int | torch.Tensor, length: int) -> int | torch.Tensor: ...
@overload
def _get_index(index: Any, length: int) -> int | range | torch.Tensor: ...
def _get_index(index: Any, length: int) -> int | range | torch.Tensor:
    """Normalize a read index: ints and tensors within ``[-length, length)``, slices to a range."""
    index = _as_index(index)
    if isinstance(index, torch.Tensor):
        return _check_tensor(index, length, length, "get")[0]
    if isinstance(index, slice):
        return range(*index.indices(length))
    return _check_int(index, length, length, "get")


def _set_index(
    index: Any, length: int, capacity: int
) -> tuple[int | range | tuple[range, range] | torch.Tensor, int]:
    """Normalize a write index; return it with the filled length it implies.

    Ints and tensors may be negative (counted from ``length``) and must stay
    below ``capacity``; a slice is resolved against ``capacity`` (its bounds
    must lie within it); a tensor must be 1-D. A tensor holding consecutive
    slots (modulo ``capacity``, as a round-robin writer produces) comes back as
    a range, or as two ranges when it wraps around.
    """
    index = _as_index(index)
    if isinstance(index, torch.Tensor):
        if index.ndim != 1:
            raise ValueError(f"set index tensors must be 1-D, got shape {list(index.shape)}.")
        runs = _as_runs(index, capacity)
        if runs is not None:
            return runs, (runs.stop if isinstance(runs, range) else capacity)
        index, hi = _check_tensor(index, length, capacity, "set")
        return index, hi + 1
    if isinstance(index, slice):
        for bound in (index.start, index.stop):
            if bound is not None and not -capacity <= bound <= capacity:
                raise IndexError(
                    f"set slice {index.start}:{index.stop} is out of range for capacity {capacity}."
                )
        rng = range(*index.indices(capacity))
        return rng, (max(rng[0], rng[-1]) + 1 if rng else 0)
    resolved = _check_int(index, length, capacity, "set")
    return resolved, resolved + 1


def _as_runs(index: torch.Tensor, capacity: int) -> range | tuple[range, range] | None:
    """``index`` as consecutive slots modulo ``capacity`` (one or two ranges), or None."""
    n = index.shape[0]
    if n == 0:
        return range(0)
    first = int(index[0])
    if not 0 <= first < capacity or n > capacity:
        return None
    end = first + n
    expected = torch.arange(first, end, device=index.device)
    if end > capacity:
        expected[capacity - first :] -= capacity
    if not torch.equal(index, expected):
        return None
    if end <= capacity:
        return range(first, end)
    return range(first, capacity), range(0, end - capacity)


def shape_of(storage: Storage) -> tuple[int, ...]:
    """A storage's shape: ``(capacity, *lead)`` for a tensor storage, ``(max_size,)`` otherwise.

    Only tensor storages have ``ndim > 1`` (items of several cells along the lead dims).

    Examples:
        >>> from rbdata import LazyTensorStorage, ListStorage
        >>> shape_of(ListStorage(5)), shape_of(LazyTensorStorage(5))
        ((5,), (5,))
    """
    return tuple(storage.shape)
