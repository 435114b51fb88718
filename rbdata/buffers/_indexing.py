"""Indexing a replay buffer: ``rb[i]``, ``rb[i] = x``, in-place edits of entries, queries."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, check_indices, normalize_key
from rbdata.buffers._components import _BufferBase
from rbdata.buffers._conditional_update import (
    ConditionalUpdateResult,
    Records,
    conditional_update,
)
from rbdata.errors import IncompatibleValueError
from rbdata.storages import TensorStorage

#: the buffer class a method returns (``self``)
_I = TypeVar("_I", bound="_Indexing")


class _Indexing(_BufferBase):
    """Reading and editing stored items by position or key, and querying trajectories.

    ``rb[index]`` reads items (transforms applied), ``rb["obs"]`` an entry of
    every stored item, ``rb[index] = data`` overwrites items in place;
    ``set_``, ``set_at_``, ``update_`` and ``update_if_present`` edit entries.
    Every edit tells the sampler which slots changed.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4))
        >>> _ = rb.extend(TensorDict({"obs": torch.zeros(4)}, [4]))
        >>> _ = rb.set_at_("obs", torch.tensor(5.0), [1])
        >>> rb["obs"].tolist()
        [0.0, 5.0, 0.0, 0.0]
    """

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)
        ):  # an entry of every stored item (torchrl's ``rb["obs"]``)
            return self._entry(index)
        storage = self.storage
        if self._sync.shared:  # no row another process is writing (see _sync.read)
            data = self._sync.read(lambda: storage.get(index))
        else:
            data = storage.get(index)
        if not isinstance(index, int) and isinstance(data, list):
            data = self._collate_fn(data)
        return self._transform(data) if len(self._transform) else data

    def __setitem__(self, index: Any, data: Any) -> None:
        with self._sync.cond:
            self.storage.set(index, data)
            self._mark_update(index)
            self._sync.cond.notify_all()

    def _leaf(self, key: Any) -> torch.Tensor:
        self._init()
        storage = self._storage
        if not isinstance(storage, TensorStorage):  # per-key leaves: tensor storages only
            raise RuntimeError(f"{type(storage).__name__} does not support per-key updates.")
        key = normalize_key(key, "key", dotted=False)
        if key not in set(storage.leaf_keys()):
            raise KeyError(f"key {key!r} is not stored; stored keys are {storage.leaf_keys()}.")
        return storage.get_leaf(key)

    def _entry(self, key: Any) -> Any:
        """A copy of entry ``key`` of every stored item (``rb["obs"]``)."""
        if isinstance(self.storage, TensorStorage):
            return self._leaf(key)[: len(self._storage)].clone()
        return self[:][key]

    def _mark_update(self, index: Any) -> None:
        """Tell the sampler and sample unit that slots were edited in place."""
        if isinstance(index, slice):
            index = torch.arange(*index.indices(len(self._storage)))
        self._sampler.mark_edited(torch.as_tensor(index, dtype=torch.long).reshape(-1))

    def read_all_in_order(self, end: int | None = None) -> Any:
        """Read storage contents in physical order (``rb[:end]``)."""
        return self.storage[: len(self.storage) if end is None else end]

    def write_all(self, data: Any, end: int | None = None) -> None:
        """Write ``data`` back to storage in physical order (``rb[:end] = data``)."""
        if end is None:
            end = data.shape[0] if isinstance(data, torch.Tensor | TensorDictBase) else len(data)
        self[:end] = data

    def set_(self: _I, key: NestedKey, value: torch.Tensor) -> _I:
        """Set the value of ``key`` across the whole buffer in place.

        Raises:
            KeyError: if ``key`` is not stored.
            ValueError: if ``value`` does not broadcast to the stored entries
                (nothing is written then).
        """
        with self._sync.lock:
            leaf = self._leaf(key)[: len(self._storage)]
            leaf.copy_(_fitting(value, leaf, key))
            self._mark_update(slice(0, len(self._storage)))
        return self

    def set_at_(self: _I, key: NestedKey, value: torch.Tensor, index: Any) -> _I:
        """Set the value of ``key`` at ``index`` (ints or an integer tensor of written slots).

        Raises:
            KeyError: if ``key`` is not stored.
            TypeError: for an index that does not hold integers.
            ValueError: for a slot outside the written ones, or a ``value`` that
                does not broadcast to the entries (nothing is written then).
        """
        with self._sync.lock:
            leaf = self._leaf(key)
            slots = check_indices(index, len(self._storage))
            leaf[slots] = _fitting(value, leaf[slots], key)
            self._mark_update(slots)
        return self

    def update_(
        self: _I,
        input_dict_or_td: Mapping[Any, torch.Tensor] | TensorDictBase,
        clone: bool = False,
        *,
        keys_to_update: Any = None,
    ) -> _I:
        """Update stored entries in place from a dict or TensorDict covering the buffer."""
        src = input_dict_or_td
        # leaves_only: the values are leaf tensors (tensordict types them Tensor | TensorCollection)
        items = cast(
            Iterable[tuple[Any, torch.Tensor]],
            src.items(True, True) if isinstance(src, TensorDictBase) else src.items(),
        )
        wanted = None
        if keys_to_update is not None:
            wanted = {normalize_key(k, "keys_to_update") for k in keys_to_update}
        for key, value in items:
            if wanted is None or normalize_key(key) in wanted:
                self.set_(key, value.clone() if clone else value)
        return self

    def update_if_present(
        self,
        *,
        index: torch.Tensor,
        generation: torch.Tensor,
        patch: Mapping[Any, torch.Tensor] | TensorDictBase,
        version_key: Any = None,
        version: int | torch.Tensor | None = None,
        require_newer: bool = False,
    ) -> ConditionalUpdateResult:
        """Patch the records whose ``(index, generation)`` is still live (see the reference doc).

        On a storage with ``ndim > 1``, ``index`` holds coordinates (``[N, ndim]``
        or a tuple, as ``extend`` returns them) or flat cells, one record per cell;
        each patch entry holds one row per record (reshaped in index order, as torchrl's).
        """
        self._init()
        with self._sync.lock:
            result = conditional_update(
                self._storage,
                self._writer,
                index=index,
                generation=generation,
                patch=patch,
                version_key=version_key,
                version=version,
                require_newer=require_newer,
            )
            self._mark_update(Records.of(index, self._storage).cells[result.updated])
            return result

    def query(
        self, predicate: Callable[..., bool] | None = None, *, trajectory_key: Any = None
    ) -> list[Any]:
        """Return the stored trajectories matching ``predicate``, oldest first."""
        from rbdata.query import run_query

        with self._sync.lock:
            self._init()
            return run_query(
                self._storage,
                transform=self._transform,
                cursor=self._writer.cursor,
                predicate=predicate,
                trajectory_key=trajectory_key,
            )


def _fitting(value: Any, target: torch.Tensor, key: Any) -> torch.Tensor:
    """``value`` as a tensor of ``target``'s dtype that broadcasts to it (ValueError if not)."""
    tensor = torch.as_tensor(value).to(target.dtype)
    try:
        return tensor.expand_as(target)
    except RuntimeError:
        raise IncompatibleValueError(
            f"value for {key!r} has shape {list(tensor.shape)}, which does not fit the "
            f"{list(target.shape)} entries it should replace."
        ) from None
