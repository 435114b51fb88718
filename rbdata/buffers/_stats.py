"""A buffer's operational counters and the stats sources registered by its consumers."""

from __future__ import annotations

import collections
import threading
from typing import Any

from torch.utils.hooks import RemovableHandle

from rbdata.buffers.protocol import StatsSource


class _BufferStats:
    """Counters a buffer keeps for ``stats()``, plus the sources others register.

    A :class:`~rbdata.ReplayDataset` or a rate limiter serving the buffer
    registers a source (a callable returning a dict of counters) and removes
    it with the returned handle; ``stats()`` merges every source's counters.

    Examples:
        >>> stats = _BufferStats()
        >>> handle = stats.register(lambda: {"loader_sampled_batches": 3})
        >>> stats.count_skipped_priority_updates(2)
        >>> stats.snapshot()
        {'skipped_priority_updates': 2, 'loader_sampled_batches': 3}
        >>> handle.remove()
        >>> stats.snapshot()
        {'skipped_priority_updates': 2}
    """

    def __init__(self) -> None:
        self._sources: collections.OrderedDict[int, StatsSource] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.skipped_priority_updates = 0

    def register(self, source: StatsSource) -> RemovableHandle:
        """Merge ``source()`` into every snapshot until ``handle.remove()``."""
        if not callable(source):
            raise TypeError(f"a stats source must be callable, got {type(source).__name__}.")
        with self._lock:
            handle = RemovableHandle(self._sources)
            self._sources[handle.id] = source
        return handle

    def count_skipped_priority_updates(self, n: int) -> None:
        """Count ``n`` priority updates skipped because their slot was rewritten."""
        self.skipped_priority_updates += n

    def snapshot(self) -> dict[str, Any]:
        """The buffer's own counters, then every registered source's."""
        out: dict[str, Any] = {"skipped_priority_updates": self.skipped_priority_updates}
        with self._lock:
            sources = list(self._sources.values())
        for source in sources:
            out.update(source())
        return out

    def state_dict(self) -> dict[str, Any]:
        """The counters (sources are runtime attachments, not state)."""
        return {"skipped_priority_updates": self.skipped_priority_updates}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the counters; missing ones are kept."""
        self.skipped_priority_updates = int(
            state_dict.get("skipped_priority_updates", self.skipped_priority_updates)
        )

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        _BufferStats.__init__(self)
        self.load_state_dict(state)
