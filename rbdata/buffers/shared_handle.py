"""The buffer's side of being mapped by an unrelated process on the same machine.

The mechanism (memory shared by name, the pickle another process maps,
:func:`~rbdata.sharing.handle.import_shared`) is the sharing layer's
(:mod:`rbdata.sharing.handle`); this part of the buffer says whether it can be
exported and exports itself.

Only buffers whose state other processes can follow are exported: rows in a
tensor storage, a writer writing in ring order, no ``consume_after_n_samples``
(consumed slots are reused out of order), no prefetch thread, and no
prioritized sampler (priorities given with a write would land in the copy's
own sampler).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable

from rbdata.buffers._components import _BufferBase
from rbdata.sharing.handle import dump_shared, named_sharing

_log = logging.getLogger(__name__)


class _SharedHandle(_BufferBase):
    """The buffer's side of being mapped by unrelated processes (see the module docstring)."""

    def export_reason(self) -> str | None:
        """Why another process cannot map this buffer now (None: it can)."""
        if not self._initialized or not len(self._storage):
            return "the storage holds nothing yet"
        if not self._writer.writes_in_ring_order:
            return f"its writer {type(self._writer).__name__} does not write in ring order"
        if self._consume_after_n is not None:
            return "consume_after_n_samples reuses slots out of order"
        if self._sampler.prioritized:
            return "a prioritized sampler keeps the priorities given with writes"
        if self._prefetch:
            return "a prefetch thread cannot be shared"
        return None

    def export_shared(self) -> bytes | None:
        """This buffer, shared and pickled for :func:`import_shared` (None: it cannot be).

        The rows, counters and lock move to named shared memory
        (:func:`rbdata.sharing.handle.named_sharing`). The reason a buffer is not
        exported is logged at DEBUG.

        Examples:
            >>> import torch
            >>> from rbdata import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(8))
            >>> rb.export_reason(), rb.export_shared() is None  # nothing written yet
            ('the storage holds nothing yet', True)
            >>> _ = rb.extend(torch.arange(4))
            >>> rb.export_reason() is None  # export_shared() now gives the bytes to map
            True

        Another process maps them with :func:`import_shared` (its writes land in
        this buffer's rows); ``tests/buffers/test_shared_handle.py`` shows it.
        """
        with self._sync.lock:
            reason = self.export_reason()
            if reason is None:
                try:
                    return self._pickled_shared()
                except (RuntimeError, TypeError, ValueError, pickle.PicklingError) as err:
                    _log.warning("the buffer cannot be mapped by other processes: %r", err)
                    return None
        _log.debug("the buffer is not mapped by other processes: %s", reason)
        return None

    def _pickled_shared(self) -> bytes:
        with named_sharing():
            self.share()
            return dump_shared(self)

    def guard_lock(self, alive: Callable[[], bool], dead: Callable[[], Exception]) -> None:
        """Bound this copy's waits for the shared lock by ``alive()`` (``_BufferSync.guard``)."""
        self._sync.guard(alive, dead)
