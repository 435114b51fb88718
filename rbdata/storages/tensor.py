"""TensorStorage: items as packed byte rows, a batch read with one gather.

LazyTensorStorage (``lazy_tensor.py``) lays its rows out at the first write;
where the rows live (allocation, sharing, pickling) is ``_tensor_rows.py``.

Every item is one packed byte row (see ``_packed.py``); the stored data may be
a Tensor, a TensorDict or a PyTree of tensors, and samples come back as the
same kind with a leading batch dimension.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, NamedTuple

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase, is_tensor_collection
from torch.utils._pytree import tree_map

from ._absent_keys import flatten_or_zero, given_leaves
from ._base import Index, _as_index, _check_int, _get_index, _set_index
from ._coordinates import cells_at
from ._lazy_write import members_fit, write_members
from ._new_keys import NewKeys, grow, refusal
from ._pytree import _Structure
from ._row_layout import _PackedLayout
from ._stack import _stacked
from ._state import LaidOut, _parse_state, _spec
from ._tensor_traced import _TracedRows
from ._torchrl import is_torchrl_layout, tensor_storage_state
from ._validate import _check_leaves, _check_ndim, _tails
from .checkpointers import TensorStorageCheckpointer

_SCALAR = torch.Size([])
_log = logging.getLogger(__name__)


class _Plan(NamedTuple):
    """What a first write allocates: structure, row layout and leading cell shape."""

    structure: _Structure
    layout: _PackedLayout
    lead: tuple[int, ...]
    leaves: list[torch.Tensor]
    n: int


class TensorStorage(_TracedRows):
    """A storage of tensors, wrapping pre-allocated data.

    The data (a Tensor, a TensorDict or a PyTree of tensors: dicts with str or
    int keys, lists, tuples) is copied into packed rows (one contiguous byte
    row per item holding all its leaves), so that sampling a batch costs one
    gather. The storage is full: ``len(storage) == max_size``. Later writes
    must match the per-item shapes and dtypes exactly (nothing is cast). A
    TensorDict lacking stored keys is written with zeros there (warned once);
    one bringing keys the storage lacks adds them, as torchrl's
    ``LazyTensorStorage`` does: the rows are laid out anew (every filled row
    copied, logged at INFO) and the rows not written read zeros in the new
    entries. A storage whose rows other processes map (shared) cannot change
    its layout and raises ``KeyError`` instead.

    Reads return copies: ``get(LongTensor[B])`` gives data of the stored kind
    with a leading batch dim ``B`` (a ``TensorDict`` with ``batch_size=[B]``
    for TensorDict data); ``get(int)`` one item; ``storage[a:b]`` the filled
    items in that slice. The leaves of a batch are views of one freshly
    gathered block of rows: they are not contiguous (``.contiguous()`` them
    before a ``.view`` that merges the batch dim).

    Args:
        storage: the data; its first dim is the number of items. An empty
            ``TensorDict(batch_size=[n])`` gives an uninitialized storage of ``n``
            items whose layout the first write sets (as :class:`LazyTensorStorage`).
        max_size: number of items; defaults to (and must equal) the data's first dim.
        device: where the packed rows live. Defaults to ``"cpu"``.
        ndim: number of storage dims (see :class:`LazyTensorStorage`). Defaults to 1.
        compilable: accepted as torchrl's argument (see :class:`~rbdata.Storage`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata.storages import TensorStorage
        >>> done = torch.zeros(10, 1, dtype=torch.bool)
        >>> data = TensorDict({"obs": torch.arange(10.0), "next": {"done": done}}, [10])
        >>> storage = TensorStorage(data)
        >>> len(storage), storage.max_size
        (10, 10)
        >>> sample = storage.get(torch.tensor([3, 7]))
        >>> sample["obs"], sample["next", "done"].shape
        (tensor([3., 7.]), torch.Size([2, 1]))
    """

    _default_checkpointer = TensorStorageCheckpointer

    def __init__(
        self,
        storage: Any,
        max_size: int | None = None,
        *,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        compilable: bool = False,
    ) -> None:
        _check_ndim(ndim)
        if storage is None:
            raise ValueError(
                "Expected storage to be non-null: TensorStorage wraps pre-allocated data "
                "(use LazyTensorStorage to allocate at the first write)."
            )
        if isinstance(storage, TensorDictBase) and not storage.keys():
            # An empty TensorDict only gives the capacity: the first write sets the layout.
            cells = math.prod(storage.batch_size[:ndim])
            if not cells or (max_size is not None and max_size != cells):
                raise ValueError(
                    f"an empty TensorDict storage needs a batch size of at least one item and "
                    f"max_size equal to it; got batch_size {list(storage.batch_size)} and "
                    f"max_size={max_size}."
                )
            self._setup(cells, device, ndim, compilable)
            return
        _, leaves = _Structure.infer(storage, ndim)
        first = leaves[0]
        if first.ndim < ndim:
            raise ValueError(
                f"storage data needs {ndim} leading storage dim(s); got a leaf of shape "
                f"{list(first.shape)}."
            )
        cells = math.prod(first.shape[:ndim])
        if max_size is not None and max_size != cells:
            raise ValueError(
                f"The max-size and the storage shape mismatch: got max_size={max_size} for a "
                f"storage of {cells} item(s) (shape {list(first.shape)}); max_size must equal it."
            )
        self._setup(cells, device, ndim, compilable)
        self.set(slice(0, first.shape[0]), storage)

    # ----------------------------------------------------------- properties
    @property
    def initialized(self) -> bool:
        """Whether the packed rows are allocated."""
        return self._rows is not None

    @property
    def device(self) -> torch.device:
        """Device of the samples."""
        return self._device

    @property
    def shape(self) -> torch.Size:
        """``[max_size]``, or ``[items, *lead]`` for ``ndim > 1`` (known after the first write)."""
        if self.ndim == 1:
            return torch.Size([self.max_size])
        if self._rows is None:
            raise RuntimeError(
                f"the shape of an ndim={self.ndim} storage is known after its first write."
            )
        return torch.Size([self._capacity, *self._lead])

    @property
    def has_tensordict_leaves(self) -> bool:
        """Whether the items are TensorDicts laid out as leaves (False before the first write)."""
        return self._structure is not None and self._structure.is_tensordict

    @property
    def max_size_along_dim0(self) -> int:
        """Capacity in items (along the first storage dim); writers wrap around at it."""
        return self._capacity

    @property
    def _max_size_along_dim0(self) -> int:
        """:attr:`max_size_along_dim0` under torchrl's private name (code in the wild reads it)."""
        return self._capacity

    @property
    def _len_along_dim0(self) -> int:
        return self._len

    def __len__(self) -> int:
        if self._compilable and torch.compiler.is_compiling():
            return self._len_eagerly()
        return self._len * self._cells

    @property
    def _storage(self) -> Any:
        """The whole storage as data of the stored kind (views: writes go through), or None.

        torchrl's storages expose their backing data under this name; code that
        reads ``storage._storage[index]`` works on rbdata's storages too.
        """
        if self._rows is None or self._structure is None:
            return None
        batch = torch.Size([self._capacity, *self._lead])
        views = [v.view(*batch, *v.shape[1:]) for v in self._rows.views]
        return self._structure.build(views, batch, self._out_device)

    def leaf_keys(self) -> list[Any]:
        """Stored leaf keys: ``"obs"``, ``("next", "obs")``, ``()`` for a single tensor."""
        return [] if self._structure is None else self._structure.leaf_keys()

    def get_leaf(self, key: Any) -> torch.Tensor:
        """A writable view ``[capacity, *shape]`` of one leaf over the whole storage."""
        if self._rows is None or self._structure is None:
            raise RuntimeError("get_leaf needs an initialized storage (write data first).")
        return self._rows.views[self._structure.leaf_index(key)]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, "
            f"device={self._device}, ndim={self.ndim}, keys={self.leaf_keys()})"
        )

    # ------------------------------------------------- what the buffer asks
    def as_batch(self, data: Any, dim: int) -> Any:
        """``data`` with its items along dim 0: a list stacked, dim ``dim`` moved first."""
        if isinstance(data, list):
            data = _stacked(data)
        if dim > 0:
            if isinstance(data, torch.Tensor):
                data = data.movedim(dim, 0)
            elif isinstance(data, TensorDictBase):
                data = data.transpose(dim, 0)
            else:
                data = tree_map(lambda t: t.movedim(dim, 0), data)
        return data

    def item_as_batch(self, item: Any) -> Any:
        """``item`` with a leading dim of 1 (tensors, TensorDicts, tensorclasses, PyTree leaves)."""
        if isinstance(item, torch.Tensor) or is_tensor_collection(item):
            return item.unsqueeze(0)
        return tree_map(lambda t: torch.as_tensor(t).unsqueeze(0), item)

    # ----------------------------------------------------------- validation
    def validate(self, data: Any, batched: bool) -> None:
        """Check ``data`` against the storage; raise KeyError/TypeError/ValueError if it differs.

        Args:
            data: a batch (``batched=True``: leading dim = number of items) or one item.
            batched: whether ``data`` has the leading items dim.
        """
        if self._rows is None:
            self._plan(data, batched)
            return
        # NewKeys: checked against the layout that holds the new keys too; the write adds them
        with contextlib.suppress(NewKeys):
            self._leaves(data, batched)

    def _plan(self, data: Any, batched: bool) -> _Plan:
        storage_dims = self.ndim if batched else self.ndim - 1
        structure, leaves = _Structure.infer(data, storage_dims)
        first = leaves[0]
        if first.ndim < storage_dims:
            raise ValueError(
                f"{structure.key_repr(0)}: expected {storage_dims} leading storage dim(s), got "
                f"shape {list(first.shape)}."
            )
        lead = tuple(first.shape[storage_dims - self.ndim + 1 : storage_dims])
        layout = _PackedLayout(
            [t.dtype for t in leaves], [tuple(t.shape[storage_dims:]) for t in leaves]
        )
        n = _check_leaves(structure, leaves, layout.dtypes, _tails(layout, lead), batched)
        return _Plan(structure, layout, lead, leaves, n)

    def _init(self, data: Any) -> None:
        """Lay out the rows for items like ``data`` (one item), as a first write would.

        torchrl's storages allocate in this hook; code that pre-allocates a lazy
        storage with ``storage._init(item)`` works here too.

        Raises:
            RuntimeError: if the storage is already initialized.
        """
        if self._rows is not None:
            raise RuntimeError(f"{type(self).__name__} is already initialized.")
        plan = self._plan(data, False)
        if not math.prod(plan.lead):
            raise ValueError(
                f"max_size={self.max_size} cannot hold one item of {list(plan.lead)} cells."
            )
        self._allocate(plan.structure, plan.layout, plan.lead)

    def _leaves(self, data: Any, batched: bool) -> tuple[list[torch.Tensor], int]:
        structure, layout, _ = self._allocated()
        try:
            leaves = flatten_or_zero(
                structure, data, layout.dtypes, self._tails, batched, self._warned
            )
        except KeyError as err:
            grown = grow(structure, layout, self._lead, data, batched)
            if grown is None:
                raise
            why = self._layout_fixed()
            if why is not None:
                raise refusal(grown, type(self).__name__, why) from None
            raise NewKeys(str(err.args[0]), grown) from None
        if [t.dtype for t in leaves] == layout.dtypes:
            shapes = [t.shape for t in leaves]
            if not batched:
                if shapes == self._tails:
                    return leaves, 1
            elif shapes[0]:
                n = shapes[0][0]
                expected = self._batch_shapes.get(n)
                if expected is None:
                    if len(self._batch_shapes) >= 64:
                        self._batch_shapes.clear()
                    expected = [torch.Size((n, *tail)) for tail in self._tails]
                    self._batch_shapes[n] = expected
                if shapes == expected:
                    return leaves, n
        return leaves, _check_leaves(structure, leaves, layout.dtypes, self._tails, batched)

    # ---------------------------------------------------------------- write
    def reads_own_memory(self, data: Any) -> bool:
        """Whether ``data`` views these rows (a write split in runs must copy it first)."""
        if self._rows is None or self._structure is None:
            return False
        try:
            leaves = given_leaves(self._structure, data)
        except (KeyError, TypeError, ValueError):
            return False  # the write itself reports what is wrong
        return self._rows.aliases(leaves)

    def batch_leaves(self, data: Any) -> list[torch.Tensor] | None:
        """The checked leaves of the batch ``data``, for :meth:`write_leaves` (see ``Storage``)."""
        if self._rows is None or self._cells != 1 or self.ndim != 1 or self._compilable:
            return None
        if self._writes_members(data):
            return None  # written by ``_set`` through the rows' views
        try:
            leaves, n = self._leaves(data, True)
        except NewKeys:
            return None  # ``set`` lays the rows out anew first
        if not n or n > self._capacity or self._rows.aliases(leaves):
            return None
        return leaves

    def write_leaves(self, start: int, leaves: list[torch.Tensor]) -> None:
        """Copy ``leaves`` (of :meth:`batch_leaves`) into rows ``start ..`` (counters unchanged)."""
        self._allocated()[2].write_range(start, leaves)

    def _writes_members(self, data: Any) -> bool:
        """Whether ``data`` is a lazy stack of items written member-wise (``_lazy_write.py``)."""
        if type(data) is not LazyStackedTensorDict or self._compilable:
            return False
        if self._rows is None or self._structure is None or self._cells != 1 or self.ndim != 1:
            return False
        layout = self._allocated()[1]
        return members_fit(self._structure, layout.dtypes, self._tails, data) and not (
            self.reads_own_memory(data)
        )

    def _set_members(self, index: Index, data: Any) -> int:
        """Write the lazy stack of items ``data`` at ``index`` through the rows' views."""
        slots, stop = _set_index(index, self._len, self._capacity)
        if isinstance(slots, int) or _count(slots) != len(data.tensordicts):
            raise ValueError(
                f"index selects {_count(slots)} item(s) but data holds {len(data.tensordicts)}."
            )
        write_members(self._storage, slots, data)
        return stop

    def _set(self, index: Index, data: Any) -> int:
        try:
            return self._set_laid_out(index, data)
        except NewKeys as new:
            grown = new.grown
        # the data brings keys the storage lacks: rows laid out anew, then the write
        _log.info(
            "%s: the write adds key(s) %s; the %d filled row(s) are copied into a new row "
            "layout of %d bytes (was %d).",
            type(self).__name__,
            grown.shown(),
            len(self),
            grown.layout.row_bytes,
            self._allocated()[1].row_bytes,
        )
        before = self._relayout(grown.structure, grown.layout, grown.moves)
        try:
            stop = self._set_laid_out(index, data)
        except BaseException:
            self._undo_relayout(before)
            raise
        self._commit_relayout()
        return stop

    def _layout_fixed(self) -> str | None:
        """Why the row layout cannot change now (None: it can take new keys)."""
        if self._rows_mapped_elsewhere():
            return (
                "other processes map its rows (shared=True, shared_init, share(), a spawned "
                "writer or a same-node map), and their layout cannot change under them"
            )
        if torch.compiler.is_compiling():
            return "torch.compile is tracing the write (lay the keys out in an eager write)"
        return None

    def _set_laid_out(self, index: Index, data: Any) -> int:
        """Write ``data`` at ``index`` in the current layout (``NewKeys``: it lacks keys)."""
        if type(index) is not int and self._writes_members(data):
            return self._set_members(index, data)
        if type(index) is slice and self._cells == 1 and self.ndim == 1 and self._rows is not None:
            # the writers' hot path: items in range (``plain`` checks that the bounds are ints)
            start: int = index.start
            stop: int = index.stop
            plain = index.step is None and type(start) is type(stop) is int
            if plain and 0 <= start <= stop <= self._capacity:
                leaves, n = self._leaves(data, True)
                if n != stop - start:
                    raise ValueError(f"index selects {stop - start} item(s) but data holds {n}.")
                if not n:
                    return 0
                self._rows.write_range(start, self._rows.unaliased(leaves))
                return stop
        index = _as_index(index)
        batched = not isinstance(index, int)
        plan = None
        if self._rows is None:
            plan = self._plan(data, batched)
            leaves, n = plan.leaves, plan.n
            cells = math.prod(plan.lead)
            capacity = -(-self.max_size // cells) if cells else 0  # ceil, as torchrl
            if capacity == 0:
                raise ValueError(
                    f"max_size={self.max_size} cannot hold one item of {list(plan.lead)} cells."
                )
        else:
            leaves, n = self._leaves(data, batched)
            capacity = self._capacity
        slots, stop = _set_index(index, self._len, capacity)
        count = _count(slots)
        if count != n:
            raise ValueError(f"index selects {count} item(s) but data holds {n}.")
        if plan is not None:
            self._allocate(plan.structure, plan.layout, plan.lead)
            if not isinstance(slots, int) and self._writes_members(data):
                write_members(self._storage, slots, data)  # as later writes of such a batch
                return stop
        self._write(slots, leaves, batched)
        return stop

    def _write(
        self,
        index: int | range | tuple[range, range] | torch.Tensor,
        leaves: list[torch.Tensor],
        batched: bool,
    ) -> None:
        _, layout, rows = self._allocated()
        cells = self._cells
        leaves = rows.unaliased(leaves)
        if cells != 1 or self.ndim > 1:  # [n, *lead, *shape] -> one row per cell
            leaves = [t.reshape(-1, *shape) for t, shape in zip(leaves, layout.shapes, strict=True)]
        elif not batched:
            leaves = [t.unsqueeze(0) for t in leaves]
        if isinstance(index, int):
            rows.write_range(index * cells, leaves)
        elif isinstance(index, torch.Tensor):
            rows.write_index(self._to_cells(index), leaves)
        elif isinstance(index, tuple):
            head = len(index[0]) * cells
            rows.write_range(index[0].start * cells, [t[:head] for t in leaves])
            rows.write_range(0, [t[head:] for t in leaves])
        elif index.step == 1:
            if len(index):
                rows.write_range(index.start * cells, leaves)
        else:
            rows.write_index(
                self._to_cells(torch.arange(index.start, index.stop, index.step)), leaves
            )

    # ----------------------------------------------------------------- read
    def _get(self, index: Index | tuple[Any, ...]) -> Any:
        if type(index) is torch.Tensor and not self._compilable:  # a drawn batch: fewest checks
            rows, structure = self._rows_value, self._structure
            filled = self._len * self._cells
            if (
                rows is not None
                and structure is not None
                and filled
                and index.ndim == 1
                and index.dtype is torch.int64
            ):
                try:  # the gather rejects what lies outside the filled part (negatives included)
                    leaves = rows.read_leaves(index, filled)
                except IndexError:
                    pass  # the checked path below resolves negative entries or names the bad one
                else:
                    return structure.build(leaves, index.shape, self._out_device)
        coordinates = isinstance(index, tuple) and self.ndim > 1
        if coordinates:  # coordinates, as torchrl's: flat cells from here on
            index = cells_at(tuple(self.shape), index)  # type: ignore[arg-type]
        if self._compilable and torch.compiler.is_compiling():
            traced = self._get_traced(index)
            if traced is not None:
                return traced
        filled = len(self)
        if (
            type(index) is torch.Tensor
            and index.ndim == 1
            and filled
            and index.dtype is torch.int64
        ):
            structure, _, rows = self._allocated()
            try:  # the gather rejects what lies outside the filled part (negatives included)
                leaves = rows.read_leaves(index, filled)
            except IndexError:
                pass  # the checked path resolves negative entries or names the bad one
            else:
                return structure.build(leaves, index.shape, self._out_device)
        index = _as_index(index)
        if isinstance(index, slice):
            return self._get_items(range(*index.indices(self._len)))
        structure, _, rows = self._allocated()  # before the bounds: RuntimeError, as torchrl
        if isinstance(index, int) and self.ndim > 1 and not coordinates:  # an item, as torchrl
            item = _check_int(index, self._len, self._len, "get")
            lead = torch.Size(self._lead)
            packed = rows.read_range(item * self._cells, (item + 1) * self._cells)
            return structure.build(rows.split(packed, lead), lead, self._out_device)
        slots = _get_index(index, len(self))
        if isinstance(slots, int):
            leaves = rows.split(rows.read_range(slots, slots + 1), _SCALAR)
            return structure.build(leaves, _SCALAR, self._out_device)
        batch = slots.shape
        flat = slots if slots.ndim == 1 else slots.reshape(-1)
        leaves = rows.split(rows.read_index(flat), batch)
        return structure.build(leaves, batch, self._out_device)

    def read_into(self, index: torch.Tensor, memory: torch.Tensor) -> Any | None:
        """``get(index)`` as one gather of packed rows into ``memory`` (None: it cannot)."""
        if self._rows is None or self._structure is None or not len(self):
            return None
        packed = self._rows.read_index_into(index, len(self), memory)
        if packed is None:
            return None
        leaves = self._rows.split(packed, index.shape)
        return self._structure.build(leaves, index.shape, self._out_device)

    def _get_items(self, items: range) -> Any:
        structure, _, rows = self._allocated()
        cells, n = self._cells, len(items)
        if items.step == 1 or n <= 1:
            start = items.start * cells if n else 0
            packed = rows.read_range(start, start + n * cells)
        else:
            packed = rows.read_index(
                self._to_cells(torch.arange(items.start, items.stop, items.step))
            )
        if cells == 1 and self.ndim == 1:
            batch = torch.Size([n])
            return structure.build(rows.split(packed, batch), batch, self._out_device)
        lead = self._lead
        leaves = [t.movedim(0, len(lead)) for t in rows.split(packed, torch.Size([n, *lead]))]
        return structure.build(leaves, torch.Size([*lead, n]), self._out_device)

    # ------------------------------------------------------------ lifecycle
    def _empty(self) -> None:
        """Forget the items; the rows stay allocated."""

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Content and layout as tensors and plain values (``torch.load(weights_only=True)``-safe).

        Returns:
            ``{"len": filled cells, "content": {flat key: leaf[:len]}, "spec": {flat key:
            {"shape": per-item shape, "dtype": name}}, "structure": container description,
            "lead": leading cell shape (ndim > 1)}``.
        """
        if self._rows is None:
            return {"len": 0, "content": {}, "spec": {}, "structure": None, "lead": []}
        structure, layout, rows = self._allocated()
        filled = len(self)
        names = structure.names
        return {
            "len": filled,
            "content": {n: v[:filled].clone() for n, v in zip(names, rows.views, strict=True)},
            "spec": _spec(names, layout),
            "structure": structure.state(),
            "lead": list(self._lead),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` content; on mismatch ValueError, storage unchanged.

        A torchrl storage state (``_storage``, ``initialized``, ``_len``) is read too.
        """
        if is_torchrl_layout(state_dict):
            # an uninitialized storage of the same capacity lays rows out as rbdata saves them
            scratch = TensorStorage(TensorDict(batch_size=[self.max_size]))
            state_dict = tensor_storage_state(state_dict, self, scratch)
        ours = None
        if self._rows is not None:
            structure, layout, _ = self._allocated()
            ours = LaidOut(structure, layout, self._lead, self._capacity)
        parsed = _parse_state(state_dict, self.ndim, self.max_size, ours)
        if parsed is None:
            self.empty()
            return
        structure, layout, lead, filled, leaves = parsed
        if self._rows is None:
            self._allocate(structure, layout, lead)
        if filled:
            self._allocated()[2].write_range(0, leaves)
        self._len = filled // self._cells


# --------------------------------------------------------------- helpers
def _count(index: int | range | tuple[range, range] | torch.Tensor) -> int:
    """Number of items a normalized write index addresses."""
    if isinstance(index, int):
        return 1
    if isinstance(index, tuple):
        return len(index[0]) + len(index[1])
    return len(index)
