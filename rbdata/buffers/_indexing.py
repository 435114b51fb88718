"""Indexing a replay buffer: ``rb[i]``, ``rb[i] = x``, in-place edits of entries, queries."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, check_indices, normalize_key
from rbdata.buffers._components import _Components
from rbdata.buffers._conditional_update import (
    ConditionalUpdateResult,
    Records,
    conditional_update,
)
from rbdata.errors import IncompatibleValueError
from rbdata.storages import TensorStorage


def _is_view_index(index: Any, storage: Any) -> bool:
    """A tuple holding a slice, for a storage with ``ndim > 1``: an index of ``rb[:]``.

    Tuples of ints or integer tensors stay coordinates (``info["index"]``).
    """
    return (
        isinstance(index, tuple)
        and storage.ndim > 1
        and any(isinstance(i, slice) or i is Ellipsis for i in index)
    )


def _is_whole(index: Any, storage: Any) -> bool:
    """``rb[:]`` of a storage with ``ndim > 1``: written as ``rb[:]`` reads (lead dims first)."""
    return isinstance(index, slice) and index == slice(None) and storage.ndim > 1


class _Indexing:
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

    def __init__(self, components: _Components) -> None:
        self._components = components

    def get(self, index: Any) -> Any:
        """``rb[index]``: items (transforms applied), or an entry of every item (a key)."""
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)
        ):  # an entry of every stored item (torchrl's ``rb["obs"]``)
            return self._entry(index)
        c = self._components
        c.init()
        storage = c.storage
        if _is_view_index(index, storage):  # rb[0, 3:4]: an index of rb[:] (torchrl's)
            return self.get(slice(None))[index]
        sync = c.sync
        # shared: no row another process is writing (see _sync.read)
        data = sync.read(lambda: storage.get(index)) if sync.shared else storage.get(index)
        if not isinstance(index, int) and isinstance(data, list):
            data = c.collate_fn(data)
        return c.transform(data) if len(c.transform) else data

    def set(self, index: Any, data: Any) -> None:
        """``rb[index] = data``: overwrite items in place (through the inverse transforms).

        As ``extend`` does, and as torchrl's ``__setitem__`` does, the data
        goes through ``transform.inv`` before it is stored.
        """
        c = self._components
        with c.sync.cond:
            c.init()
            if len(c.transform):
                data = c.transform.inv(data)
            if _is_view_index(index, c.storage):
                self._set_view(index, data)
            elif _is_whole(index, c.storage):  # rb[:] = rb[:]-shaped data, as torchrl's
                self._set_view((index,), data)
            else:
                c.storage.set(index, data)
                self._mark_update(index)
            c.sync.cond.notify_all()

    def _set_view(self, index: tuple[Any, ...], data: Any) -> None:
        """``rb[0, 3:4] = data`` on a storage with ``ndim > 1``: an index of ``rb[:]``.

        As torchrl's (``rb[:][index] = data``): ints and slices index the
        dims of ``rb[:]`` (the storage's lead dims, then its items), ``data``
        broadcasts to the selection. The stored items are read, edited and
        written back in place (O(size) per call); lengths, cursor and
        generations stay, the samplers re-read the edited cells.
        """
        storage = self._components.storage
        whole = storage.get(slice(None))
        if not isinstance(whole, torch.Tensor | TensorDictBase):
            raise TypeError(
                f"rb[{index!r}] = ... indexes rb[:], which is a {type(whole).__name__} here: "
                "only tensor and TensorDict contents take it."
            )
        whole[index] = data
        items = whole.shape[storage.ndim - 1]
        storage.set(slice(0, items), storage.as_batch(whole, storage.ndim - 1), set_cursor=False)
        self._mark_update(slice(0, len(storage)))

    def _leaf(self, key: Any) -> torch.Tensor:
        c = self._components
        c.init()
        storage = c.storage
        if not isinstance(storage, TensorStorage):  # per-key leaves: tensor storages only
            raise RuntimeError(f"{type(storage).__name__} does not support per-key updates.")
        key = normalize_key(key, "key", dotted=False)
        if key not in set(storage.leaf_keys()):
            raise KeyError(f"key {key!r} is not stored; stored keys are {storage.leaf_keys()}.")
        return storage.get_leaf(key)

    def _entry(self, key: Any) -> Any:
        """A copy of entry ``key`` of every stored item (``rb["obs"]``)."""
        c = self._components
        c.init()
        if isinstance(c.storage, TensorStorage):
            return self._leaf(key)[: len(c.storage)].clone()
        return self.get(slice(None))[key]

    def _mark_update(self, index: Any) -> None:
        """Tell the sampler and sample unit that slots were edited in place."""
        c = self._components
        if isinstance(index, slice):
            index = torch.arange(*index.indices(len(c.storage)))
        c.sampler.mark_edited(torch.as_tensor(index, dtype=torch.long).reshape(-1))

    def set_(self, key: NestedKey, value: torch.Tensor) -> None:
        """Set the value of ``key`` across the whole buffer in place."""
        c = self._components
        with c.sync.lock:
            self._set_leaf(key, value)
            c.storage.note_edit()
            self._mark_update(slice(0, len(c.storage)))

    def _set_leaf(self, key: NestedKey, value: torch.Tensor) -> None:
        leaf = self._leaf(key)[: len(self._components.storage)]
        leaf.copy_(_fitting(value, leaf, key))

    def set_at_(self, key: NestedKey, value: torch.Tensor, index: Any) -> None:
        """Set the value of ``key`` at ``index`` (ints or an integer tensor of written slots)."""
        c = self._components
        with c.sync.lock:
            leaf = self._leaf(key)
            slots = check_indices(index, len(c.storage))
            leaf[slots] = _fitting(value, leaf[slots], key)
            c.storage.note_edit()
            self._mark_update(slots)

    def update_(
        self,
        input_dict_or_td: Mapping[Any, torch.Tensor] | TensorDictBase,
        clone: bool,
        keys_to_update: Any,
    ) -> None:
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
        c = self._components
        with c.sync.lock:
            for key, value in items:
                if wanted is None or normalize_key(key) in wanted:
                    self._set_leaf(key, value.clone() if clone else value)
            c.storage.note_edit()
            self._mark_update(slice(0, len(c.storage)))

    def update_if_present(
        self,
        index: torch.Tensor,
        generation: torch.Tensor,
        patch: Mapping[Any, torch.Tensor] | TensorDictBase,
        version_key: Any,
        version: int | torch.Tensor | None,
        require_newer: bool,
    ) -> ConditionalUpdateResult:
        """Patch the records whose ``(index, generation)`` is still live."""
        c = self._components
        c.init()
        with c.sync.lock:
            result = conditional_update(
                c.storage,
                c.writer,
                index=index,
                generation=generation,
                patch=patch,
                version_key=version_key,
                version=version,
                require_newer=require_newer,
            )
            if bool(result.updated.any()):
                c.storage.note_edit()
            self._mark_update(Records.of(index, c.storage).cells[result.updated])
            return result

    def query(self, predicate: Callable[..., bool] | None, trajectory_key: Any) -> list[Any]:
        """The stored trajectories matching ``predicate``, oldest first."""
        from rbdata.query import run_query

        c = self._components
        with c.sync.lock:
            c.init()
            return run_query(
                c.storage,
                transform=c.transform,
                cursor=c.writer.cursor,
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
