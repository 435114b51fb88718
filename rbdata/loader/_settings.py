"""What the pass engine and the worker code read from a ReplayDataset (its settings)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from rbdata.buffers.protocol import ServableBuffer
from rbdata.loader._worker_position import WorkerPosition

if TYPE_CHECKING:
    from rbdata.loader.rate_limit import SampleToInsertRatio


class DatasetSettings(Protocol):
    """The settings of a :class:`~rbdata.ReplayDataset`, as its collaborators see them."""

    buffer: ServableBuffer
    batch_size: int
    num_batches: int | None
    prefetch: int
    pin_memory: bool
    device: torch.device | None
    min_size: int
    timeout: float | None
    rate_limiter: SampleToInsertRatio | None
    return_info: bool
    #: batches a consumer holds back from the training step (Lightning looks one ahead)
    held_back: int

    @property
    def pins_batches(self) -> bool:
        """Whether batches are pinned (``pin_memory`` and an accelerator is there)."""

    @property
    def batch_device(self) -> torch.device | None:
        """The device batches are copied to (None: they stay on the CPU)."""

    @property
    def worker_position(self) -> WorkerPosition:
        """This worker's position in its share of a pass (DataLoader worker processes)."""
