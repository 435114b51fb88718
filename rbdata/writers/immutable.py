"""ImmutableDatasetWriter: a writer that refuses every write (fixed, offline datasets)."""

from __future__ import annotations

from typing import Any, NoReturn

import torch

from rbdata.writers._base import Writer

__all__ = ["ImmutableDatasetWriter"]


class ImmutableDatasetWriter(Writer):
    """A writer that refuses every write, for fixed (offline) datasets.

    Raises:
        RuntimeError: from ``add`` and ``extend``, always.

    Examples:
        >>> import torch
        >>> from rbdata import ImmutableDatasetWriter, ReplayBuffer, TensorStorage
        >>> rb = ReplayBuffer(
        ...     storage=TensorStorage(torch.arange(5)), writer=ImmutableDatasetWriter()
        ... )
        >>> len(rb), rb.write_count
        (5, 0)
    """

    def _write_one(self, data: Any) -> NoReturn:
        raise RuntimeError(
            "Cannot write to a buffer with an ImmutableDatasetWriter (this buffer is read-only); "
            "build the buffer with a RoundRobinWriter to add data."
        )

    def _write_batch(self, data: Any) -> torch.Tensor:
        self._write_one(data)

    def write_at(self, index: torch.Tensor, data: Any) -> torch.Tensor:
        """Refuse the write (see :meth:`_write_one`)."""
        self._write_one(data)
