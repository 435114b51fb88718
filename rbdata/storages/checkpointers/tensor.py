"""TensorStorageCheckpointer: a tensor storage in torchrl's on-disk layout (memory-mapped files)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection
from tensordict.memmap import MemoryMappedTensor

from rbdata._component.stateful import transaction

from .base import StorageCheckpointerBase, _CheckpointedStorage

__all__ = ["TensorStorageCheckpointer"]

_SINGLE_TENSOR = "_-single-tensor-_"
_METADATA = "storage_metadata.json"
_DTYPES = {str(dtype): dtype for dtype in vars(torch).values() if isinstance(dtype, torch.dtype)}


class TensorStorageCheckpointer(StorageCheckpointerBase):
    """Writes a tensor storage as torchrl's ``TensorStorageCheckpointer`` does.

    The directory holds the rows as a memory-mapped TensorDict (``meta.json``
    and one ``.memmap`` file per leaf), or for a storage of plain tensors one
    ``_-single-tensor-_.memmap`` file, and ``storage_metadata.json``
    (``{"metadata", "is_pytree", "len"}``). Every slot is written (``max_size``
    rows; unwritten ones as zeros), so that torchrl's ``loads`` reads the
    directory into a storage of the same ``max_size``, and rbdata's reads
    torchrl's. Save hooks are called as ``hook(data, path=path)`` (a hook with
    ``is_full``/``shift`` attributes is told where the ring stands), load hooks
    as ``hook(data, out=None)``, as torchrl calls them. Nothing is unpickled.

    Deliberate limits: storages with ``ndim > 1`` and PyTree items other than
    a single tensor are refused (``ValueError``/``TypeError``) — rbdata's
    default ``dumps`` (no checkpointer) saves them; ``loads`` copies the rows
    into the storage (it never maps the files as the storage's own memory).

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorStorageCheckpointer
        >>> storage = LazyTensorStorage(8)
        >>> storage.checkpointer = TensorStorageCheckpointer()
        >>> storage.set(torch.arange(3), TensorDict(obs=torch.arange(3.0), batch_size=[3]))
        >>> copy = LazyTensorStorage(8)
        >>> copy.checkpointer = TensorStorageCheckpointer()
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage.dumps(folder)
        ...     copy.loads(folder)
        >>> len(copy), copy.get(torch.arange(3))["obs"].tolist()
        (3, [0.0, 1.0, 2.0])
    """

    def dumps(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Write every slot of ``storage`` and its length in the directory ``path``."""
        root = Path(path)
        if not storage.initialized:
            raise RuntimeError("Cannot save a non-initialized storage.")
        if storage.ndim != 1:
            raise ValueError(
                f"{type(self).__name__} saves storages with ndim=1; this one has "
                f"ndim={storage.ndim}. Leave storage.checkpointer unset to use rbdata's format."
            )
        length = len(storage)
        if length == 0:
            raise RuntimeError("Cannot save an empty storage with a TensorStorageCheckpointer.")
        rows = all_rows(storage, length)
        root.mkdir(parents=True, exist_ok=True)
        self._prepare_save_hooks(storage)
        for hook in self._save_hooks:
            rows = hook(rows, path=root)
        metadata: dict[str, Any] = {}
        if is_tensor_collection(rows):
            rows.memmap(root, copy_existing=True)
            is_pytree = False
        elif isinstance(rows, torch.Tensor):
            MemoryMappedTensor.from_tensor(
                rows.contiguous(), filename=root / f"{_SINGLE_TENSOR}.memmap", existsok=True
            )
            metadata[_SINGLE_TENSOR] = {"shape": list(rows.shape), "dtype": str(rows.dtype)}
            is_pytree = True
        else:
            raise TypeError(
                f"{type(self).__name__} saves TensorDicts, tensorclasses and tensors; this "
                f"storage holds {type(rows).__name__}. Leave storage.checkpointer unset to "
                "use rbdata's format."
            )
        (root / _METADATA).write_text(
            json.dumps({"metadata": metadata, "is_pytree": is_pytree, "len": length})
        )

    def loads(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Read the rows in ``path`` (written by this class or torchrl's) into ``storage``."""
        root = Path(path)
        metadata_file = root / _METADATA
        if not metadata_file.is_file():
            raise FileNotFoundError(f"{metadata_file} does not exist: no storage was saved there.")
        metadata = json.loads(metadata_file.read_text())
        length = metadata.get("len")
        if type(length) is not int or length < 0:
            raise ValueError(f"{metadata_file}: 'len' must be an int >= 0, got {length!r}.")
        rows: Any
        if metadata.get("is_pytree"):
            if self._load_hooks:
                raise RuntimeError("Loading hooks are not compatible with PyTree storages.")
            leaves = metadata.get("metadata") or {}
            if set(leaves) != {_SINGLE_TENSOR}:
                raise ValueError(
                    f"{metadata_file}: PyTree storages other than a single tensor are not "
                    f"read by rbdata (leaves {sorted(leaves)})."
                )
            leaf = leaves[_SINGLE_TENSOR]
            dtype = _DTYPES.get(leaf["dtype"])
            if dtype is None:
                raise ValueError(f"{metadata_file}: unknown dtype {leaf['dtype']!r}.")
            rows = MemoryMappedTensor.from_filename(
                filename=root / f"{_SINGLE_TENSOR}.memmap",
                shape=torch.Size(leaf["shape"]),
                dtype=dtype,
            )
        else:
            _refuse_pickles(root)
            rows = TensorDict.load_memmap(root)
            for hook in self._load_hooks:
                rows = hook(rows, out=None)
            if storage.initialized and len(storage) and isinstance(rows, TensorDictBase):
                # keep the entries the storage holds (a load hook may add some, e.g. root dones)
                stored = storage.get(torch.arange(1)).keys(True, True)
                rows = rows.select(*stored, strict=False)
        if length > rows.shape[0] or length > storage.max_size_along_dim0:
            raise ValueError(
                f"{metadata_file}: 'len' is {length}, but the saved rows hold {rows.shape[0]} "
                f"and the storage {storage.max_size_along_dim0}."
            )
        with transaction(storage):  # a write that fails leaves the storage as it was
            storage.empty()
            if length:
                storage.set(torch.arange(length), _copy(rows[:length]))


def all_rows(storage: _CheckpointedStorage, length: int) -> Any:
    """Every slot of ``storage``: the written ones, then zeros up to ``max_size``."""
    written = storage.get(torch.arange(length))
    if is_tensor_collection(written):
        written = written.to_tensordict() if not isinstance(written, TensorDict) else written
    if not isinstance(written, torch.Tensor | TensorDict):
        return written
    capacity = storage.max_size_along_dim0
    if capacity == length:
        return written
    rows = torch.zeros_like(written[:1]).expand(capacity, *written.shape[1:]).clone()
    rows[:length] = written
    return rows


def _refuse_pickles(root: Path) -> None:
    """Refuse a directory holding a pickle (tensordict pickles non-JSON entries)."""
    pickles = sorted(str(p.relative_to(root)) for p in root.rglob("*.pkl"))
    if pickles:
        raise ValueError(
            f"{root} holds pickled entries ({', '.join(pickles)}); rbdata does not unpickle "
            "files. Save the storage without Python objects in it."
        )


def _copy(rows: Any) -> Any:
    return rows.clone() if isinstance(rows, torch.Tensor) else rows.to_tensordict()
