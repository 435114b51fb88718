"""Serving a replay buffer to a training loop: ReplayDataset, its batches and rate limiting."""

from rbdata.loader._batch import ReplayBatch
from rbdata.loader.dataset import ReplayDataset
from rbdata.loader.rate_limit import SampleToInsertRatio

__all__ = ["ReplayBatch", "ReplayDataset", "SampleToInsertRatio"]
