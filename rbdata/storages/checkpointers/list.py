"""The list storages' checkpointers: ListStorageCheckpointer, CompressedListStorageCheckpointer."""

from __future__ import annotations

import os

from rbdata._component.state_file import read_state, write_state

from .base import StorageCheckpointerBase, _CheckpointedStorage

__all__ = ["CompressedListStorageCheckpointer", "ListStorageCheckpointer"]


class ListStorageCheckpointer(StorageCheckpointerBase):
    """torchrl's checkpointer of a ``ListStorage``: it refuses to save or load.

    Set it to have a list storage refuse ``dumps``/``loads`` as torchrl's does;
    without a checkpointer, rbdata's ``ListStorage.dumps`` saves its items
    (Python objects load back only with ``allow_pickle`` on the buffer).

    Examples:
        >>> from rbdata import ListStorage, ListStorageCheckpointer
        >>> storage = ListStorage(4)
        >>> storage.checkpointer = ListStorageCheckpointer()
        >>> storage.dumps("unused")
        Traceback (most recent call last):
        ...
        NotImplementedError: ListStorage doesn't support serialization via `dumps` - `loads` API.
    """

    def dumps(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Raise ``NotImplementedError`` (torchrl's behaviour)."""
        raise NotImplementedError(
            "ListStorage doesn't support serialization via `dumps` - `loads` API."
        )

    def loads(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Raise ``NotImplementedError`` (torchrl's behaviour)."""
        raise NotImplementedError(
            "ListStorage doesn't support serialization via `dumps` - `loads` API."
        )


class CompressedListStorageCheckpointer(StorageCheckpointerBase):
    """Saves a ``CompressedListStorage``: its compressed items and their metadata.

    The items stay compressed on disk. The layout is rbdata's
    (``storage_state.pt``, read back with ``weights_only=True``), not torchrl's
    ``metadata.json`` + ``compressed_data/`` (whose items torchrl keeps as
    compressed byte tensors too, under a metadata layout of its own): a
    directory written by one library is not read by the other. Saving an
    empty storage raises ``RuntimeError``, as torchrl's does.

    Examples:
        >>> import tempfile, torch
        >>> from rbdata import CompressedListStorage, CompressedListStorageCheckpointer
        >>> storage = CompressedListStorage(8)
        >>> storage.checkpointer = CompressedListStorageCheckpointer()
        >>> storage.set(torch.arange(2), torch.stack([torch.zeros(64), torch.ones(64)]))
        >>> copy = CompressedListStorage(8)
        >>> copy.checkpointer = CompressedListStorageCheckpointer()
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage.dumps(folder)
        ...     copy.loads(folder)
        >>> len(copy), float(copy[1].sum())
        (2, 64.0)
    """

    def dumps(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Write the compressed items of ``storage`` in the directory ``path``."""
        if not len(storage):
            raise RuntimeError("Cannot save an empty or non-initialized CompressedListStorage.")
        write_state(storage.state_dict(), path, "storage")

    def loads(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Read what :meth:`dumps` wrote in ``path`` into ``storage``."""
        storage.load_state_dict(read_state(path, "storage"))
