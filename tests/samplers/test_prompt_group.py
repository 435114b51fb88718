"""PromptGroupSampler: whole groups per batch, four in-group strategies (torchrl's)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PromptGroupSampler,
    ReplayBuffer,
)


def _buffer(**kwargs: object) -> ReplayBuffer:
    sampler = PromptGroupSampler(group_key="prompt", reward_key="reward", **kwargs)  # type: ignore[arg-type]
    rb = ReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=8)
    rb.extend(TensorDict({"prompt": torch.arange(12) // 4, "reward": torch.arange(12.0)}, [12]))
    return rb


@pytest.mark.parametrize("kwargs", [{"num_groups": 2}, {"samples_per_group": 4}])
def test_a_batch_is_whole_groups_of_distinct_items(kwargs: dict[str, int]) -> None:
    sample = _buffer(**kwargs).sample()
    groups = sample["prompt"].reshape(2, 4)
    assert (groups == groups[:, :1]).all() and groups[0, 0] != groups[1, 0]
    assert sample["reward"].unique().numel() == 8


def test_reward_and_variance_strategies_pick_by_reward() -> None:
    sample = _buffer(num_groups=3, strategy="reward").sample(6)
    by_group = {
        int(p): sorted(r.tolist())
        for p, r in zip(sample["prompt"][::2], sample["reward"].reshape(3, 2), strict=True)
    }
    assert by_group == {0: [2.0, 3.0], 1: [6.0, 7.0], 2: [10.0, 11.0]}
    sample = _buffer(num_groups=3, strategy="variance").sample(6)
    rewards = sorted(sample["reward"].reshape(3, 2)[0].tolist())
    assert rewards[1] - rewards[0] == 3.0  # the lowest and the highest of the group


def test_recency_draws_the_last_written() -> None:
    rb = _buffer(num_groups=1, strategy="recency")
    rb.extend(
        TensorDict({"prompt": torch.tensor([0, 0]), "reward": torch.tensor([50.0, 51.0])}, [2])
    )
    for _ in range(5):
        sample = rb.sample(2)
        if int(sample["prompt"][0]) == 0:
            assert sorted(sample["reward"].tolist()) == [50.0, 51.0]


def test_small_groups_are_completed_with_replacement_and_warn_once() -> None:
    rb = _buffer(samples_per_group=6)
    with pytest.warns(UserWarning, match="smaller than the requested sample size"):
        sample = rb.sample(12)
    assert sample.shape == (12,)


def test_string_groups_on_a_lazy_stack_storage() -> None:
    sampler = PromptGroupSampler(num_groups=2, group_key="prompt")
    rb = ReplayBuffer(storage=LazyStackStorage(10), sampler=sampler, batch_size=4)
    for i, text in enumerate(["a", "a", "b", "b", "c", "c"]):
        rb.add(TensorDict({"prompt": text, "x": torch.tensor(i)}, []))
    sample = rb.sample()
    assert sample["x"].shape == (4,) and len(set(sample["prompt"])) == 2


def test_errors() -> None:
    with pytest.raises(TypeError, match="Exactly one"):
        PromptGroupSampler()
    with pytest.raises(ValueError, match="num_groups"):
        PromptGroupSampler(num_groups=0)
    with pytest.raises(ValueError, match="strategy"):
        PromptGroupSampler(num_groups=1, strategy="best")
    with pytest.raises(ValueError, match="not divisible"):
        _buffer(num_groups=3).sample(8)
    plain = ReplayBuffer(storage=ListStorage(10), sampler=PromptGroupSampler(num_groups=1))
    plain.extend([1, 2])
    with pytest.raises(TypeError, match="TensorDicts"):
        plain.sample(2)


def test_recency_state_round_trip() -> None:
    rb = _buffer(num_groups=1, strategy="recency")
    other = PromptGroupSampler(num_groups=1, strategy="recency")
    other.load_state_dict(rb.sampler.state_dict())
    assert other.state_dict()["recency_clock"] == 12


def test_a_write_by_another_buffer_over_the_storage_refreshes_the_groups() -> None:
    storage = LazyTensorStorage(6)
    reader = ReplayBuffer(
        storage=storage, sampler=PromptGroupSampler(num_groups=2, group_key="prompt"), batch_size=4
    )
    writer = ReplayBuffer(
        storage=storage, sampler=PromptGroupSampler(num_groups=2, group_key="prompt"), batch_size=4
    )
    writer.extend(TensorDict({"prompt": torch.tensor([0, 0, 0, 1, 1, 1])}, [6]))
    reader.sample()
    writer.add(TensorDict({"prompt": 1}, []))  # slot 0: group 1 now (the length stays 6)
    for _ in range(10):
        _, counts = reader.sample()["prompt"].unique(return_counts=True)
        assert counts.tolist() == [2, 2]
