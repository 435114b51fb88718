"""The client's one-round-trip methods: each runs the same-named method of the hosted buffer."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata.buffers._conditional_update import ConditionalUpdateResult


class _ForwardedMethods:
    """ReplayBuffer methods a client runs in the actor, one call each (mixed into the client)."""

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError  # the client provides it

    # -------------------------------------------------------------- writing
    def add(self, data: Any) -> int:
        """Add one element; return the index where it lives."""
        return int(self._call("add", data))

    def extend(self, data: Any, *, update_priority: bool | None = None) -> torch.Tensor:
        """Extend the buffer with a batch of elements; return their indices."""
        index: torch.Tensor = self._call("extend", data, update_priority=update_priority)
        return index

    def __setitem__(self, index: Any, data: Any) -> None:
        self._call("__setitem__", index, data)

    def write_all(self, data: Any, end: int | None = None) -> None:
        """Write ``data`` back to storage in physical order (``rb[:end] = data``)."""
        self._call("write_all", data, end)

    def empty(self, empty_write_count: bool = True) -> None:
        """Empty the buffer and reset the cursor to 0."""
        self._call("empty", empty_write_count)

    # -------------------------------------------------------------- reading
    def __getitem__(self, index: Any) -> Any:
        return self._call("__getitem__", index)

    def next(self) -> Any:
        """The next batch of the hosted buffer's iterator (None when a pass ends)."""
        return self._call("next")

    def read_all_in_order(self, end: int | None = None) -> Any:
        """Read storage contents in physical order (``rb[:end]``)."""
        return self._call("read_all_in_order", end)

    def query(
        self, predicate: Callable[..., bool] | None = None, *, trajectory_key: Any = None
    ) -> list[Any]:
        """The stored trajectories matching ``predicate`` (the predicate runs in the actor)."""
        found: list[Any] = self._call("query", predicate, trajectory_key=trajectory_key)
        return found

    # -------------------------------------------------------------- updates
    def update_priority(
        self,
        index: torch.Tensor | int,
        priority: torch.Tensor | float,
        *,
        generation: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> None:
        """Update priorities of ``index`` (skipping slots rewritten since ``generation``)."""
        self._call("update_priority", index, priority, generation=generation, **kwargs)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update priorities from a sampled batch (``index``, priority key, generations)."""
        self._call("update_tensordict_priority", data)

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
        """Patch the records whose (index, generation) is still live."""
        result: ConditionalUpdateResult = self._call(
            "update_if_present",
            index=index,
            generation=generation,
            patch=patch,
            version_key=version_key,
            version=version,
            require_newer=require_newer,
        )
        return result

    def update_(
        self,
        input_dict_or_td: Mapping[Any, torch.Tensor] | TensorDictBase,
        clone: bool = False,
        *,
        keys_to_update: Any = None,
    ) -> Any:
        """Update stored entries in place from a dict or TensorDict covering the buffer."""
        return self._call("update_", input_dict_or_td, clone, keys_to_update=keys_to_update)

    def set_(self, key: Any, value: torch.Tensor) -> Any:
        """Set the value of ``key`` across the whole buffer in place."""
        return self._call("set_", key, value)

    def set_at_(self, key: Any, value: torch.Tensor, index: Any) -> Any:
        """Set the value of ``key`` at ``index`` in place."""
        return self._call("set_at_", key, value, index)

    # ------------------------------------------------------- state and disk
    def state_dict(self) -> dict[str, Any]:
        """The hosted buffer's full state (content included)."""
        state: dict[str, Any] = self._call("state_dict")
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (validated first; unchanged on error)."""
        self._call("load_state_dict", state_dict)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save the hosted buffer in ``path`` (a path on the actor's node)."""
        self._call("dumps", os.fspath(path))

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Load a dump at ``path`` (a path on the actor's node) into the hosted buffer."""
        self._call("loads", os.fspath(path))

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`loads`."""
        self.loads(path)

    # ----------------------------------------------------------- components
    def append_transform(self, transform: Any, *, invert: bool = False) -> Any:
        """Append a transform to the hosted buffer's chain."""
        return self._call("append_transform", transform, invert=invert)

    def insert_transform(self, index: int, transform: Any, *, invert: bool = False) -> Any:
        """Insert a transform at ``index`` of the hosted buffer's chain."""
        return self._call("insert_transform", index, transform, invert=invert)

    def set_storage(self, storage: Any, collate_fn: Callable[[Any], Any] | None = None) -> Any:
        """Set a new storage in the hosted buffer; return (a copy of) the previous one."""
        return self._call("set_storage", storage, collate_fn)

    def set_sampler(self, sampler: Any) -> Any:
        """Set a new sampler in the hosted buffer; return (a copy of) the previous one."""
        return self._call("set_sampler", sampler)

    def set_writer(self, writer: Any) -> Any:
        """Set a new writer in the hosted buffer; return (a copy of) the previous one."""
        return self._call("set_writer", writer)

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Use ``generator`` (a copy of it, in the actor) for sampling from now on."""
        self._call("set_rng", generator)

    def register_save_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a storage save hook in the hosted buffer."""
        self._call("register_save_hook", hook)

    def register_load_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a storage load hook in the hosted buffer."""
        self._call("register_load_hook", hook)

    # ------------------------------------------------------- protocol bits
    def publish_policy_version(self, version: int) -> None:
        """Make ``version`` the live version of every PolicyAgeFilter of the hosted buffer."""
        self._call("publish_policy_version", int(version))
