"""A DataLoader that batches ReplayDataset's whole batches again is refused, not silently wrong."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from rbdata import LazyTensorStorage, ReplayDataset, TensorDictReplayBuffer


def dataset() -> ReplayDataset:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=8)
    rb.extend(TensorDict({"obs": torch.randn(50, 4)}, batch_size=[50]))
    return ReplayDataset(rb, num_batches=2)


@pytest.mark.parametrize("loader", [DataLoader, StatefulDataLoader])
@pytest.mark.parametrize("kwargs", [{}, {"batch_size": 4}])
def test_a_loader_that_batches_again_raises(loader, kwargs):
    with pytest.raises(ValueError, match=r"batch_size=None.*whole batches of 8|whole batches of 8"):
        next(iter(loader(dataset(), **kwargs)))


@pytest.mark.parametrize("loader", [DataLoader, StatefulDataLoader])
def test_batch_size_none_gives_whole_batches(loader):
    batches = list(loader(dataset(), batch_size=None))
    assert [b.batch_size for b in batches] == [torch.Size([8])] * 2
    assert batches[0]["obs"].shape == (8, 4)


def test_iterating_the_dataset_directly_is_untouched():
    assert [b["obs"].shape for b in dataset()] == [(8, 4)] * 2
