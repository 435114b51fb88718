"""LazyMemmapStorage: a lazy tensor storage whose packed rows live in a file on disk."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import torch
from tensordict import MemoryMappedTensor

from .tensor import LazyTensorStorage

_PACKED_FILE = "packed.memmap"


class LazyMemmapStorage(LazyTensorStorage):
    """A lazy tensor storage whose rows are a memory-mapped file.

    Behaves like :class:`LazyTensorStorage`, but at the first write the packed
    rows (one contiguous byte row per item, all leaves in it) are created as a
    tensordict ``MemoryMappedTensor`` file ``<scratch_dir>/packed.memmap`` of
    ``capacity * row_bytes`` bytes. Pickling the storage (e.g. sending it to a
    ``torch.multiprocessing`` child) ships the file name, not the data: both
    processes see the same rows.

    Args:
        max_size: number of slots (cells).
        scratch_dir: directory of the file; ``None`` makes a fresh temporary
            directory, removed when the storage is garbage collected.
        device: device of the samples (the rows stay on disk, in CPU memory).
            Defaults to ``"cpu"``.
        ndim: number of storage dims (see :class:`LazyTensorStorage`). Defaults to 1.
        existsok: whether an existing ``packed.memmap`` in ``scratch_dir`` may be
            overwritten; if False, the first write raises ``RuntimeError``.
            Defaults to False.

    Examples:
        >>> import os, tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata.storages import LazyMemmapStorage
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     storage = LazyMemmapStorage(100, scratch_dir=tmp)
        ...     storage.set(slice(0, 4), TensorDict({"obs": torch.ones(4, 3)}, [4]))
        ...     print(os.listdir(tmp), storage.get(torch.tensor([1, 2]))["obs"].shape)
        ['packed.memmap'] torch.Size([2, 3])
    """

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | Path | None = None,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        existsok: bool = False,
    ) -> None:
        super().__init__(max_size, device=device, ndim=ndim)
        self.scratch_dir = None if scratch_dir is None else str(scratch_dir)
        self.existsok = existsok
        self._mmap: MemoryMappedTensor | None = None
        self._cleanup: weakref.finalize | None = None

    @property
    def filename(self) -> str | None:
        """Path of the packed rows file (None before the first write)."""
        return None if self._mmap is None else self._mmap.filename

    def _new_packed(self, rows: int, row_bytes: int) -> torch.Tensor:
        directory = self.scratch_dir
        if directory is None:
            directory = tempfile.mkdtemp(prefix="rbdata-memmap-")
            cleanup = weakref.finalize(self, shutil.rmtree, directory, ignore_errors=True)
        else:
            os.makedirs(directory, exist_ok=True)
            cleanup = None
        path = os.path.join(directory, _PACKED_FILE)
        if os.path.exists(path):
            if not self.existsok:
                raise RuntimeError(
                    f"{path} already exists; pass existsok=True to overwrite it, or another "
                    "scratch_dir."
                )
            os.remove(path)
        self._mmap = MemoryMappedTensor.empty(
            (rows, row_bytes), dtype=torch.uint8, filename=path, existsok=True
        )
        self.scratch_dir, self._cleanup = directory, cleanup
        return self._mmap.as_subclass(torch.Tensor)

    def _share_rows(self) -> None:
        """The rows are a file: every process mapping it shares them already."""

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_cleanup"] = None
        return state

    def _packed_to_pickle(self, packed: torch.Tensor) -> Any:
        return True

    def _packed_from_pickle(self, obj: Any) -> torch.Tensor:
        return self._mmap.as_subclass(torch.Tensor)
