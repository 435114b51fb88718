"""Batch reads into caller memory: the rows a buffer reads for one batch land where asked.

A Ray owner hands batches to a client on its node through shared-memory slots.
Instead of gathering a batch and copying it into a slot, it asks the buffer to
read the batch's rows straight into the slot (:meth:`ReplayBuffer.reading_into
<rbdata.ReplayBuffer.reading_into>`) and then runs the buffer's own
``sample``/``gather``: collation, info entries, transforms and row filters all
happen as in any other read, and the batch's tensors view the slot wherever
the read path kept them. Storages that cannot read into caller memory
(:meth:`~rbdata.storages.Storage.read_into` returns None) read as usual.

The memory serves one read: the block's first batch read of that buffer in
that thread. Other threads, and other buffers (the parts of a mixture), read
as usual.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from rbdata.storages import Storage

__all__ = ["read_rows", "reading_into"]


class _Targets(threading.local):
    """Per thread: ``by_buffer``, id(buffer) -> the memory of its next read."""

    def __init__(self) -> None:
        self.by_buffer: dict[int, torch.Tensor] = {}


_targets = _Targets()


class reading_into:  # noqa: N801 - used as a function: ``with reading_into(buffer, memory):``
    """While the block runs, ``buffer``'s next batch read in this thread lands in ``memory``.

    Raises:
        RuntimeError: entering it inside another ``reading_into`` block of the same buffer.
    """

    def __init__(self, buffer: object, memory: torch.Tensor) -> None:
        self._key = id(buffer)
        self._memory = memory

    def __enter__(self) -> None:
        targets = _targets.by_buffer
        if self._key in targets:
            raise RuntimeError("reading_into blocks of one buffer do not nest.")
        targets[self._key] = self._memory

    def __exit__(self, *exc: object) -> None:
        _targets.by_buffer.pop(self._key, None)


def read_rows(buffer: object, storage: Storage, index: torch.Tensor) -> Any:
    """``storage.get(index)``, into the memory of an open :func:`reading_into` of ``buffer``.

    Examples:
        >>> import torch
        >>> from rbdata.storages import LazyTensorStorage
        >>> storage = LazyTensorStorage(8)
        >>> storage.set(slice(0, 4), torch.arange(4.0))
        >>> memory, owner = torch.zeros(64, dtype=torch.uint8), object()
        >>> with reading_into(owner, memory):
        ...     batch = read_rows(owner, storage, torch.tensor([3, 1]))
        >>> batch.tolist(), batch.untyped_storage().data_ptr() == memory.data_ptr()
        ([3.0, 1.0], True)
    """
    targets = _targets.by_buffer
    memory = targets.pop(id(buffer), None) if targets else None
    if memory is not None and type(index) is torch.Tensor:
        data = storage.read_into(index, memory)
        if data is not None:
            return data
    return storage.get(index)
