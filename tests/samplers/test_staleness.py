"""StalenessAwareSampler: freshness-weighted draws with a hard staleness bound (torchrl's)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyStackStorage,
    LazyTensorStorage,
    ReplayBuffer,
    StalenessAwareSampler,
    TensorDictReplayBuffer,
)


def _buffer(sampler: StalenessAwareSampler, storage=None) -> TensorDictReplayBuffer:  # type: ignore[no-untyped-def]
    rb = TensorDictReplayBuffer(storage=storage or LazyTensorStorage(100), sampler=sampler)
    versions = torch.tensor([0, 1, 2, 3])
    rb.extend(TensorDict({"policy_version": versions, "obs": versions * 10}, [4]))
    return rb


def test_stale_items_are_never_drawn_and_info_gives_staleness() -> None:
    sampler = StalenessAwareSampler(max_staleness=1)
    rb = _buffer(sampler)
    sampler.consumer_version = 3
    batch, info = rb.sample(64, return_info=True)
    assert set(batch["policy_version"].tolist()) <= {2, 3}
    assert torch.equal(info["staleness"], 3 - batch["policy_version"].float())


def test_fresher_items_are_drawn_more_often() -> None:
    torch.manual_seed(0)
    sampler = StalenessAwareSampler()
    rb = _buffer(sampler)
    sampler.consumer_version = 3
    counts = torch.bincount(rb.sample(20000)["policy_version"], minlength=4).float()
    expected = torch.tensor([1 / 4, 1 / 3, 1 / 2, 1.0])
    assert torch.allclose(counts / counts.sum(), expected / expected.sum(), atol=0.02)


def test_a_custom_weight_and_a_list_storage() -> None:
    sampler = StalenessAwareSampler(staleness_weight_fn=lambda s: (s == 0).float())
    rb = _buffer(sampler, LazyStackStorage(100))
    sampler.increment_consumer_version()
    assert set(rb.sample(16)["policy_version"].tolist()) == {1}


def test_everything_stale_or_no_version_key_raises() -> None:
    sampler = StalenessAwareSampler(max_staleness=0)
    rb = _buffer(sampler)
    sampler.consumer_version = 10
    with pytest.raises(RuntimeError, match="exceed max_staleness=0"):
        rb.sample(2)
    plain = ReplayBuffer(storage=LazyTensorStorage(10), sampler=StalenessAwareSampler())
    plain.extend(TensorDict({"obs": torch.arange(3)}, [3]))
    with pytest.raises(KeyError, match="policy_version"):
        plain.sample(2)


def test_state_round_trip_and_empty() -> None:
    sampler = StalenessAwareSampler(max_staleness=4)
    sampler.consumer_version = 7
    other = StalenessAwareSampler()
    other.load_state_dict(sampler.state_dict())
    assert (other.consumer_version, other.max_staleness) == (7, 4)
    rb = _buffer(other)
    rb.empty()
    assert other.consumer_version == 0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessAwareSampler(max_staleness=-2)
    with pytest.raises(TypeError, match="staleness_weight_fn"):
        StalenessAwareSampler(staleness_weight_fn=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="consume_after_n_samples"):
        ReplayBuffer(sampler=StalenessAwareSampler(), consume_after_n_samples=1)
