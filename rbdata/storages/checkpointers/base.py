"""StorageCheckpointerBase: the interface every storage checkpointer implements."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["StorageCheckpointerBase"]

Hook = Callable[..., Any]


class _CheckpointedStorage(Protocol):
    """What a checkpointer uses of a storage (rbdata's ``Storage`` has all of it)."""

    max_size: int
    ndim: int

    @property
    def initialized(self) -> bool: ...

    @property
    def newest_slot(self) -> int | None: ...

    @property
    def max_size_along_dim0(self) -> int: ...

    def __len__(self) -> int: ...

    def get(self, index: Any) -> Any: ...

    def set(self, index: Any, data: Any, *, set_cursor: bool = True) -> None: ...

    def empty(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...

    def dumps(self, path: str | os.PathLike[str]) -> None: ...

    def loads(self, path: str | os.PathLike[str]) -> None: ...


class StorageCheckpointerBase:
    """Base class of the storage checkpointers (torchrl's name and interface).

    A checkpointer writes a storage to a directory (:meth:`dumps`) and reads
    it back (:meth:`loads`); save hooks transform the content before it is
    written, load hooks after it is read. Subclasses implement ``dumps`` and
    ``loads``; this base implements neither (``NotImplementedError``).

    Examples:
        >>> import json, os, tempfile, torch
        >>> from rbdata import ListStorage, StorageCheckpointerBase
        >>> class LengthOnly(StorageCheckpointerBase):
        ...     def dumps(self, storage, path):
        ...         os.makedirs(path, exist_ok=True)
        ...         with open(os.path.join(path, "len.json"), "w") as file:
        ...             json.dump(len(storage), file)
        ...     def loads(self, storage, path):
        ...         with open(os.path.join(path, "len.json")) as file:
        ...             print("saved length:", json.load(file))
        >>> storage = ListStorage(10)
        >>> storage.set(torch.arange(3), [1, 2, 3])
        >>> storage.checkpointer = LengthOnly()
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage.dumps(folder)
        ...     storage.loads(folder)
        saved length: 3
    """

    def __init__(self) -> None:
        self._save_hooks: list[Hook] = []
        self._load_hooks: list[Hook] = []

    def register_save_hook(self, hook: Hook) -> None:
        """Register a callable applied to the content before :meth:`dumps` writes it."""
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}.")
        self._save_hooks.append(hook)

    def register_load_hook(self, hook: Hook) -> None:
        """Register a callable applied to the content after :meth:`loads` reads it."""
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}.")
        self._load_hooks.append(hook)

    def dumps(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Write ``storage`` in the directory ``path``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement dumps.")

    def loads(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Read what :meth:`dumps` wrote in ``path`` into ``storage``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement loads.")

    def _prepare_save_hooks(self, storage: _CheckpointedStorage) -> None:
        """Tell hooks with ``is_full``/``shift`` attributes where the ring stands (as torchrl)."""
        last = storage.newest_slot
        if last is None and len(storage):
            last = len(storage) - 1
        is_full = len(storage) == storage.max_size_along_dim0
        shift = 0 if last is None else last + 1
        for hook in self._save_hooks:
            if hasattr(hook, "is_full"):
                hook.is_full = is_full
            if hasattr(hook, "shift"):
                hook.shift = shift
