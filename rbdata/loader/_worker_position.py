"""The resume state of one DataLoader worker process: where it is in its share of a pass."""

from __future__ import annotations

from typing import Any


class WorkerPosition:
    """Per-worker resume state: batches this worker yielded in its share of the pass."""

    def __init__(self) -> None:
        self.yielded = 0
        self.skip = 0

    def state_dict(self) -> dict[str, int]:
        """The worker's position."""
        return {"yielded": self.yielded}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume: the next pass of this worker skips the batches already yielded."""
        self.skip = int(state_dict.get("yielded", 0))
