"""List storages: ListStorage (any object) and LazyStackStorage (TensorDicts of any shape)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDictBase, is_tensor_collection
from torch.utils.data._utils.collate import default_collate

from rbdata._component.checks import check_int
from rbdata.sharing.counters import component_counters, spawning

from ._base import Index, Storage, _as_index, _get_index, _identity, _set_index
from ._torchrl import is_torchrl_layout, list_storage_state
from .checkpointers import ListStorageCheckpointer

#: ``max_size`` of an unbounded list storage (``max_size=None``), torchrl's value
_UNBOUNDED = torch.iinfo(torch.int64).max


def _copy(item: Any) -> Any:
    """``item`` copied if it is a tensor or a tensor collection, else as is."""
    if isinstance(item, torch.Tensor) or is_tensor_collection(item):
        return item.clone()
    return item


def _collate_list(items: list[Any]) -> Any:
    """Stack items read from a list storage (TensorDicts stacked, the rest default-collated)."""
    if items and isinstance(items[0], TensorDictBase):
        return torch.stack(items)
    return default_collate(items)


class ListStorage(Storage):
    """A storage of arbitrary Python objects, kept in a list.

    Items are stored as given (no copy). ``get(int)`` returns one item,
    ``get(LongTensor)`` a list of items (the buffer's ``collate_fn`` merges
    them), ``storage[a:b]`` the list of filled items in that slice.

    ``max_size=None`` makes the storage unbounded (``max_size`` is then the
    largest int64, as in torchrl).

    ``state_dict()`` returns ``{"len": int, "_storage": list}`` (the items under
    torchrl's key): the items are the stored objects themselves, so saving it
    needs pickle unless they are all tensors or plain Python values
    (``torch.load(weights_only=True)`` refuses arbitrary objects).
    ``load_state_dict`` copies the tensors and TensorDicts it is given, so that
    the loaded storage does not change with the state it came from.

    Args:
        max_size: number of slots; None for no bound. Defaults to 1000.

    Keyword Args:
        compilable: accepted as torchrl's argument (see :class:`Storage`).
        device: move the items that have a ``.to()`` (tensors, TensorDicts) to this
            device when they are written. Defaults to None (items are kept as given).

    Examples:
        >>> import torch
        >>> from rbdata.storages import ListStorage
        >>> storage = ListStorage(max_size=100)
        >>> storage.set(torch.arange(3), ["a", 1, None])
        >>> storage.get(torch.tensor([1, 0])), storage[-1], len(storage)
        ([1, 'a'], None, 3)
    """

    _default_checkpointer = ListStorageCheckpointer

    def __init__(
        self,
        max_size: int | None = None,
        *,
        compilable: bool = False,
        device: torch.device | str | int | None = None,
    ) -> None:
        super().__init__(_UNBOUNDED if max_size is None else max_size, compilable=compilable)
        if not compilable:
            # the items live in this process only: so does the length, so that what a
            # forked child writes into its copy never moves the length of this one
            self._counters = component_counters([0, 0, -1], process_local=True)
        self._device = None if device is None else torch.device(device)
        self._items: list[Any] = []

    @property
    def device(self) -> torch.device | None:
        """Where written items that have a ``.to()`` are moved (None: kept as given)."""
        return self._device

    @device.setter
    def device(self, value: torch.device | str | int | None) -> None:
        self._device = None if value is None else torch.device(value)

    def __getstate__(self) -> dict[str, Any]:
        if spawning():
            raise RuntimeError(
                f"Cannot share a storage of type {type(self).__name__} between processes: its "
                "items are Python objects in this process's memory. Use a LazyTensorStorage or "
                "a LazyMemmapStorage for a buffer that child processes write."
            )
        return self.__dict__.copy()

    def default_collate_fn(self) -> Callable[[Any], Any]:
        """Stack the items read together (TensorDicts, tensors, numbers, PyTrees of them)."""
        return _collate_list

    def as_batch(self, data: Any, dim: int) -> Any:
        """A list of items: a list, a tensor or a TensorDict as is, any other iterable listed.

        Raises:
            TypeError: if ``data`` is a tuple: a tuple is a PyTree, and a list storage
                holds unbound items only (the reference page: "no PyTrees").
        """
        if isinstance(data, tuple):
            raise TypeError(
                f"data given to extend() is a tuple (a PyTree) and {type(self).__name__} "
                "holds unbound items only: pass a list of items (a tuple is one PyTree, "
                "stored by TensorStorage / LazyTensorStorage / LazyMemmapStorage)."
            )
        return data if isinstance(data, list | TensorDictBase | torch.Tensor) else list(data)

    def _place(self, item: Any) -> Any:
        if self._device is not None and hasattr(item, "to"):
            return item.to(self._device)
        return item

    @property
    def initialized(self) -> bool:
        """Always True: a list needs no allocation."""
        return True

    def _set(self, index: Index, data: Any) -> int:
        slots, stop = _set_index(index, self._len, self.max_size)
        if isinstance(slots, int):
            positions, items = [slots], [data]  # one item, stored as given
        else:
            if isinstance(slots, torch.Tensor):
                positions = slots.tolist()
            elif isinstance(slots, tuple):
                positions = [*slots[0], *slots[1]]
            else:
                positions = list(slots)
            items = self._unbind(data)
            if len(items) != len(positions):
                raise ValueError(
                    f"index selects {len(positions)} item(s) but data holds {len(items)}."
                )
        if positions:
            missing = max(positions) + 1 - len(self._items)
            if missing > 0:
                self._items.extend([None] * missing)
            for position, item in zip(positions, items, strict=True):
                self._items[position] = self._place(item)
        return stop

    def _unbind(self, data: Any) -> list[Any]:
        """The items of a batch written at a slice or a tensor index."""
        try:
            return list(data)
        except TypeError:
            raise TypeError(
                f"writing at a slice or tensor index needs a sequence of items, got "
                f"{type(data).__name__}."
            ) from None

    def _get(self, index: Index) -> Any:
        index = _as_index(index)
        if isinstance(index, slice):
            return self._collect([self._items[i] for i in range(*index.indices(self._len))])
        slots = _get_index(index, self._len)
        if isinstance(slots, int):
            return self._items[slots]
        return self._gather(slots.tolist())

    def _gather(self, positions: list[Any]) -> Any:
        return self._collect(
            [self._gather(p) if isinstance(p, list) else self._items[p] for p in positions]
        )

    def _collect(self, items: list[Any]) -> Any:
        """Turn a list of items into what ``get`` returns for several items."""
        return items

    def _empty(self) -> None:
        self._items = []

    def state_dict(self) -> dict[str, Any]:
        """``{"len": filled slots, "_storage": the stored objects}`` (may need pickle to save)."""
        return {"len": self._len, "_storage": list(self._items[: self._len])}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the items of :meth:`state_dict`; ValueError (storage unchanged) if too many.

        A torchrl list-storage state (``{"_storage": [...]}``) is read too. Tensors
        and TensorDicts are copied (the storage does not alias the state's).
        """
        if is_torchrl_layout(state_dict):
            state_dict = list_storage_state(state_dict)
        # "items": the key of states saved before torchrl's "_storage" (dumps keep it)
        items = [_copy(item) for item in state_dict.get("_storage", state_dict.get("items", []))]
        length = state_dict.get("len", len(items))
        if len(items) > self.max_size or length != len(items):
            raise ValueError(
                f"saved state holds {len(items)} items with len={length}; expected len equal to "
                f"the item count and at most max_size={self.max_size}."
            )
        self._items = items
        self._len = length

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_size={self.max_size}, len={len(self)})"


class LazyStackStorage(ListStorage):
    """A list storage of TensorDicts whose shapes may differ from item to item.

    A batched TensorDict written at a slice or a tensor index is stored row by
    row (``td.unbind(0)``); reading several items returns them lazily stacked
    (a ``LazyStackedTensorDict``), so heterogeneous shapes are kept.

    Args:
        max_size: number of slots; None for no bound. Defaults to 1000.

    Keyword Args:
        compilable: accepted as torchrl's argument (see :class:`Storage`).
        stack_dim: the dimension the items are lazily stacked along when
            several are read (negative values count from the end of the
            stacked result). Defaults to 0.
        device: as in :class:`ListStorage`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata.storages import LazyStackStorage
        >>> storage = LazyStackStorage(max_size=10)
        >>> storage.set(0, TensorDict({"obs": torch.zeros(2)}))
        >>> storage.set(1, TensorDict({"obs": torch.ones(5)}))
        >>> batch = storage.get(torch.tensor([0, 1]))
        >>> type(batch).__name__, batch[1]["obs"].shape
        ('LazyStackedTensorDict', torch.Size([5]))
    """

    def __init__(
        self,
        max_size: int | None = None,
        *,
        compilable: bool = False,
        stack_dim: int = 0,
        device: torch.device | str | int | None = None,
    ) -> None:
        super().__init__(max_size, compilable=compilable, device=device)
        self.stack_dim = check_int(stack_dim, "stack_dim")

    def default_collate_fn(self) -> Callable[[Any], Any]:
        """Items read together are already lazily stacked: as is."""
        return _identity

    def _unbind(self, data: Any) -> list[Any]:
        if isinstance(data, TensorDictBase):
            return list(data.unbind(0))
        return super()._unbind(data)

    def _collect(self, items: list[Any]) -> Any:
        if not items:
            raise RuntimeError("cannot lazily stack zero items: the index selects nothing.")
        dim = self.stack_dim
        if dim < 0:
            dim += items[0].ndim + 1
        return LazyStackedTensorDict.lazy_stack(items, dim)
