"""ConsumingSampler: torchrl's sampler form of consume-after-n."""

from __future__ import annotations

import pytest
import torch

from rbdata import (
    ConsumingSampler,
    LazyTensorStorage,
    ListStorage,
    RandomSampler,
    ReplayBuffer,
)


def test_items_leave_after_max_sample_count_returns() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=ConsumingSampler(2), batch_size=4)
    rb.extend(torch.arange(4))
    assert sorted(rb.sample().tolist()) == [0, 1, 2, 3]
    assert len(rb) == 4
    rb.sample()
    assert len(rb) == 0
    with pytest.raises(RuntimeError, match="consumed"):
        rb.sample()


def test_the_reference_example() -> None:
    rb = ReplayBuffer(storage=ListStorage(10), sampler=ConsumingSampler(), batch_size=3)
    assert rb.extend([torch.tensor(i) for i in range(4)]).tolist() == [0, 1, 2, 3]
    assert len(rb.sample()) == 3 and len(rb) == 1


def test_new_items_reuse_consumed_slots_first() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=ConsumingSampler(), batch_size=2)
    rb.extend(torch.arange(4))
    taken = rb.sample()
    assert sorted(rb.extend(torch.tensor([7, 8])).tolist()) == sorted(taken.tolist())


def test_a_conflicting_buffer_count_is_refused_and_an_equal_one_accepted() -> None:
    with pytest.raises(ValueError, match="conflicts"):
        ReplayBuffer(
            storage=ListStorage(10), sampler=ConsumingSampler(2), consume_after_n_samples=1
        )
    rb = ReplayBuffer(
        storage=ListStorage(10), sampler=ConsumingSampler(2), consume_after_n_samples=2
    )
    assert rb.sampler.max_sample_count == 2


def test_set_sampler_brings_and_takes_away_consumption() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    rb.extend(torch.arange(4))
    rb.set_sampler(ConsumingSampler())
    rb.sample()
    assert len(rb) == 0
    rb.set_sampler(RandomSampler())
    assert len(rb) == 4 and rb.sample().shape == (4,)


def test_state_round_trip_keeps_the_counts() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=ConsumingSampler(2), batch_size=2)
    rb.extend(torch.arange(4))
    rb.sample()
    rb.sample()
    other = ReplayBuffer(storage=LazyTensorStorage(10), sampler=ConsumingSampler(2))
    other.load_state_dict(rb.state_dict())
    assert len(other) == len(rb)


@pytest.mark.parametrize("count,error", [(0, ValueError), (True, TypeError), (1.5, TypeError)])
def test_bad_max_sample_count(count: object, error: type) -> None:
    with pytest.raises(error, match="max_sample_count"):
        ConsumingSampler(count)  # type: ignore[arg-type]
