"""TensorDicts built without validation (rbdata/storages/_td_unsafe.py) are plain TensorDicts."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage
from rbdata.storages import _td_unsafe


def test_the_fast_path_is_used_with_the_installed_tensordict():
    assert _td_unsafe._same_layout()
    assert _td_unsafe.new_td is _td_unsafe._fast


def test_new_td_makes_what_new_unsafe_makes():
    leaves = {"a": torch.arange(6.0).view(3, 2), "b": torch.zeros(3, dtype=torch.bool)}
    device = torch.device("cpu")
    fast = _td_unsafe.new_td(dict(leaves), torch.Size([3]), device)
    slow = TensorDict._new_unsafe(dict(leaves), batch_size=torch.Size([3]), device=device)
    assert type(fast) is TensorDict and vars(fast).keys() == vars(slow).keys()
    assert fast.batch_size == slow.batch_size and fast.device == slow.device
    assert (fast == TensorDict(leaves, batch_size=[3], device=device)).all()
    fast["c"] = torch.ones(3)  # an ordinary, unlocked TensorDict
    fast.lock_()
    assert fast.is_locked and fast.names == [None]


def test_sampled_batches_are_ordinary_tensordicts():
    storage = LazyTensorStorage(10)
    data = TensorDict(
        {"obs": torch.randn(10, 3), "next": {"obs": torch.randn(10, 3), "done": torch.ones(10, 1)}},
        [10],
    )
    storage.set(slice(0, 10), data)
    batch = storage.get(torch.tensor([3, 1, 4]))
    expected = data[torch.tensor([3, 1, 4])]
    assert (batch == expected).all()
    assert list(batch.keys(True, True)) == list(expected.keys(True, True))
    assert batch["next"].batch_size == torch.Size([3]) and batch.device == torch.device("cpu")
    batch["extra"] = torch.zeros(3)
    assert storage.get(torch.tensor([3]))["obs"].shape == (1, 3)
