"""Writes kept in flight: a collector's ``extend`` returns before the actor has written it.

A blocking write costs a full Ray round trip per call; a collector rarely
needs the indices of what it wrote. A client built with ``write_behind=k``
sends ``add``/``extend`` and returns None at once, keeping up to ``k`` writes
in flight (the oldest is waited for when a new one would exceed that). The
writes are acknowledged, in order, by :meth:`PendingWrites.flush`, which the
client runs before any other call it makes (so a client always reads its own
writes) and on ``client.flush()``; an error raised by a write is raised there.
Unflushed writes of a process that exits are not guaranteed to arrive: flush
before a task returns.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from rbdata.service import runtime

__all__ = ["PendingWrites"]


class PendingWrites:
    """The writes a client sent and has not seen acknowledged (bounded).

    Args:
        depth: writes kept in flight (0: every write waits for its acknowledgement).

    Raises:
        TypeError: if ``depth`` is not an int.
        ValueError: if ``depth`` is negative.

    Examples:
        >>> PendingWrites(4).depth, len(PendingWrites(4))
        (4, 0)
        >>> PendingWrites(-1)
        Traceback (most recent call last):
        ...
        ValueError: write_behind must be an int >= 0, got -1.
    """

    def __init__(self, depth: int) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int):
            raise TypeError(f"write_behind must be an int, got {type(depth).__name__}.")
        if depth < 0:
            raise ValueError(f"write_behind must be an int >= 0, got {depth}.")
        self.depth = depth
        self._refs: deque[tuple[Any, str]] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._refs)

    def add(self, ref: Any, name: str) -> None:
        """Keep ``ref`` (a write sent); wait for the oldest ones beyond ``depth``."""
        with self._lock:
            self._refs.append((ref, name))
            while len(self._refs) > self.depth:
                self._wait_oldest()

    def flush(self) -> None:
        """Wait until every write sent is acknowledged; raise the first write error."""
        if not self._refs:
            return
        with self._lock:
            while self._refs:
                self._wait_oldest()

    def _wait_oldest(self) -> None:
        ref, name = self._refs.popleft()
        runtime.get(ref, name)
