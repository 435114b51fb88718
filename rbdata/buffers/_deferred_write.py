"""The buffer's side of a write whose rows are copied outside the lock (:mod:`rbdata.sharing`).

The sharing layer decides whether a write can be reserved and does it
(:func:`rbdata.sharing.reserved_write.extend_reserved`); the buffer hands it
its parts and runs its own hooks around it.
"""

from __future__ import annotations

import torch

from rbdata.buffers._components import _BufferBase
from rbdata.sharing.reserved_write import extend_reserved


class _DeferredWrites(_BufferBase):
    """The reserved write of a shared buffer (see the module docstring)."""

    def _extend_deferred(self, data: object, update_priority: bool | None) -> torch.Tensor | None:
        """``extend(data)`` with the copy outside the lock; None if this write cannot be."""
        c = self._components  # read directly: this runs on every write of a shared buffer
        if c.consume_after_n is not None or len(c.transform):
            return None
        index = extend_reserved(
            c.sync, c.write_parts, data, lambda: self._validate_extend(data, update_priority)
        )
        if index is not None:
            self._after_extend(data, index, update_priority)
        return index

    def _validate_extend(self, data: object, update_priority: bool | None) -> None:
        """Hook: check ``data`` before anything is written (prioritized buffers: priorities)."""

    def _after_extend(
        self, data: object, index: torch.Tensor, update_priority: bool | None
    ) -> None:
        """Hook: work after a write (prioritized buffers: priorities read from the data)."""
