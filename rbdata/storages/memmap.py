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

from rbdata._trust import private_dir
from rbdata.sharing.rendezvous import _Rendezvous

from .lazy_tensor import LazyTensorStorage

_PACKED_FILE = "packed.memmap"
#: the rows of a new layout, until they replace ``_PACKED_FILE`` (see ``_new_keys``)
_REGROWN_FILE = "packed.regrown.memmap"


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
        scratch_dir: directory of the file (made with mode 0700 if missing); ``None``
            makes a fresh temporary directory, removed when the storage is garbage
            collected. A directory another user could plant files in is refused.
        device: device of the samples (the rows stay on disk, in CPU memory).
            Defaults to ``"cpu"``.
        ndim: number of storage dims (see :class:`LazyTensorStorage`). Defaults to 1.
        existsok: whether an existing ``packed.memmap`` in ``scratch_dir`` may be
            overwritten; if False, the first write raises ``RuntimeError``.
            Defaults to False.
        compilable: accepted as torchrl's argument (see :class:`~rbdata.Storage`).
        shared_init: fix the scratch directory now, so that whichever process
            the storage was sent to writes first, every other one maps the same
            rows file (torchrl's multiprocess initialization).
        auto_cleanup: remove ``scratch_dir`` when the storage is garbage
            collected or :meth:`cleanup` is called. Defaults to True for a
            temporary directory (``scratch_dir=None``), False for one you gave.

    Raises:
        UntrustedPathError: when ``scratch_dir`` (or one of its parents) is owned or
            writable by another user (at construction with ``shared_init``, else at the
            first write).

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
        compilable: bool = False,
        shared_init: bool = False,
        auto_cleanup: bool | None = None,
    ) -> None:
        super().__init__(max_size, device=device, ndim=ndim, compilable=compilable)
        if self._device.type != "cpu":
            raise ValueError(
                f"LazyMemmapStorage keeps its rows in a file in CPU memory; got device="
                f"{device!r}. Use LazyTensorStorage(device=...) for a device-resident buffer."
            )
        self.scratch_dir = None if scratch_dir is None else str(scratch_dir)
        self.existsok = existsok
        self.shared_init = bool(shared_init)
        self._scratch_dir_is_temp = scratch_dir is None
        self._auto_cleanup = self._scratch_dir_is_temp if auto_cleanup is None else auto_cleanup
        self._cleaned_up = False
        self._mmap: MemoryMappedTensor | None = None
        self._regrown: MemoryMappedTensor | None = None
        self._cleanup: weakref.finalize[..., LazyMemmapStorage] | None = None
        if self.shared_init:  # any process it is sent to may write first
            self._meeting = self._new_meeting()

    @property
    def filename(self) -> str | None:
        """Path of the packed rows file (None before the first write)."""
        return None if self._mmap is None else self._mmap.filename

    def _new_packed(self, rows: int, row_bytes: int) -> torch.Tensor:
        directory = self.scratch_dir
        if directory is None:
            directory = tempfile.mkdtemp(prefix="rbdata-memmap-")
        else:
            private_dir(directory, "scratch_dir")
        cleanup = None
        if self._auto_cleanup:
            cleanup = weakref.finalize(self, shutil.rmtree, directory, ignore_errors=True)
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
        os.chmod(path, 0o600)  # the rows are the user's alone, as a shared segment's are
        self.scratch_dir, self._cleanup = directory, cleanup
        return self._mmap.as_subclass(torch.Tensor)

    def _regrown_packed(self, rows: int, row_bytes: int) -> torch.Tensor:
        """A new rows file beside the old one (:meth:`_finish_regrow` moves it into place)."""
        assert self.scratch_dir is not None  # the rows file lives there
        path = os.path.join(self.scratch_dir, _REGROWN_FILE)
        if os.path.exists(path):  # left by a process killed mid re-layout
            os.remove(path)
        self._regrown = MemoryMappedTensor.empty(
            (rows, row_bytes), dtype=torch.uint8, filename=path, existsok=True
        )
        os.chmod(path, 0o600)
        return self._regrown.as_subclass(torch.Tensor)

    def _finish_regrow(self, keep: bool) -> None:
        """Move the new rows file over the old one (``keep``), or remove it."""
        regrown, self._regrown = self._regrown, None
        if regrown is None:
            return
        path = regrown.filename
        if not keep:
            del regrown
            os.remove(path)
            return
        assert self.scratch_dir is not None and self._layout is not None
        final = os.path.join(self.scratch_dir, _PACKED_FILE)
        os.replace(path, final)  # the old file goes (its rows were copied)
        rows, row_bytes = regrown.shape
        self._set_rows(self._layout, self._map_rows(final, rows, row_bytes))

    def _rows_mapped_elsewhere(self) -> bool:
        """Whether other processes may map the rows file (its layout must not change then).

        True once the storage was pickled (sent to a process, or copied: the copy
        maps the same file) or shared before its first write (``shared_init``).
        """
        return self._meeting is not None or self._exported

    def _new_meeting(self) -> _Rendezvous:
        """The scratch directory, fixed now (a fresh temporary one if none was given)."""
        if self.scratch_dir is None:
            self.scratch_dir = tempfile.mkdtemp(prefix="rbdata-memmap-")
        elif os.path.exists(os.path.join(self.scratch_dir, _PACKED_FILE)) and not self.existsok:
            raise RuntimeError(
                f"{os.path.join(self.scratch_dir, _PACKED_FILE)} already exists; pass "
                "existsok=True to overwrite it, or another scratch_dir."
            )
        if self._auto_cleanup:
            self._cleanup = weakref.finalize(
                self, shutil.rmtree, self.scratch_dir, ignore_errors=True
            )
        return _Rendezvous(self.scratch_dir, _PACKED_FILE)

    def _map_rows(self, path: str, rows: int, row_bytes: int) -> torch.Tensor:
        self._mmap = MemoryMappedTensor.from_filename(
            filename=path, dtype=torch.uint8, shape=torch.Size([rows, row_bytes])
        )
        return self._mmap.as_subclass(torch.Tensor)

    def cleanup(self) -> bool:
        """Remove the scratch directory and its file now (the storage is unusable afterwards).

        Returns:
            True if something was removed, False if there was nothing left to remove
            (never written, already cleaned up, or removed by someone else).
        """
        directory = self.scratch_dir if self._mmap is not None else None
        if self._cleanup is not None:
            self._cleanup.detach()
            self._cleanup = None
        already, self._cleaned_up = self._cleaned_up, True
        if already or directory is None or not os.path.exists(directory):
            return False
        self._mmap = None
        shutil.rmtree(directory, ignore_errors=True)
        return True

    def _share_rows(self) -> None:
        """The rows are a file: every process mapping it shares them already."""

    def __getstate__(self) -> dict[str, Any]:
        self._exported = True  # the receiver maps the same rows file: their layout stays
        state = super().__getstate__()
        state["_cleanup"] = None
        return state

    def _packed_to_pickle(self, packed: torch.Tensor) -> Any:
        return True

    def _packed_from_pickle(self, obj: Any) -> torch.Tensor:
        if self._mmap is None:
            raise RuntimeError("the storage was pickled after cleanup(): its rows file is gone.")
        return self._mmap.as_subclass(torch.Tensor)
