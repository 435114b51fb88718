"""The resume state of one DataLoader worker process: the last batch it yielded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class WorkerPosition:
    """Per-worker resume state: the last batch this worker yielded and what resumes after it.

    ``snapshot(batch)`` (set by the worker's iterator) asks the training
    process's draw service for the sampling state right after that batch
    (see :mod:`rbdata.loader._draw_service`).
    """

    def __init__(self) -> None:
        #: the pass's number of the last batch this worker yielded (None: none yet)
        self.batch: int | None = None
        #: the snapshot a resumed worker was loaded with, until its pass begins
        self.restored: dict[str, Any] | None = None
        self.snapshot: Callable[[int], dict[str, Any]] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The worker's last batch and the state that resumes right after it."""
        if self.batch is None or self.snapshot is None:
            return {"batch": self.batch, "server": self.restored}
        return {"batch": self.batch, "server": self.snapshot(self.batch)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume: the next pass of this worker continues after the saved batch."""
        batch = state_dict.get("batch")
        server = state_dict.get("server")
        self.batch = None if batch is None else int(batch)
        self.restored = server if isinstance(server, dict) else {"batch": None}
