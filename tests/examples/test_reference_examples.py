"""The reference documents' examples, run unchanged with rbdata imports."""

from __future__ import annotations

import tempfile

import torch
from tensordict import TensorDict
from torch.utils._pytree import tree_map

from rbdata import (
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PolicyAgeFilter,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
    traj,
)


def test_replay_buffer_list_storage_example():
    torch.manual_seed(0)
    rb = ReplayBuffer(storage=ListStorage(max_size=1000), batch_size=5)
    data = range(10)
    indices = rb.extend(data)
    assert indices.tolist() == list(range(10))
    sample = rb.sample()
    assert sample.tolist() == [4, 9, 3, 0, 3]
    sample = rb.sample(batch_size=3)
    assert sample.tolist() == [9, 7, 3]
    expected = [[7, 3, 1, 6, 6], [9, 8, 6, 6, 8], [4, 3, 6, 9, 1], [4, 4, 1, 9, 9]]
    for i, batch in enumerate(rb):
        assert batch.tolist() == expected[i]
        if i == 3:
            break


def test_any_data_list_storage_example():
    torch.manual_seed(0)
    buffer = ReplayBuffer(storage=ListStorage(100), collate_fn=lambda x: x)
    buffer.extend(["a", 1, None])
    assert buffer.sample(3) == [None, "a", None]


def test_pytree_memmap_example():
    def transform(x):
        return tree_map(lambda y: y * 0, x)

    rb = ReplayBuffer(storage=LazyMemmapStorage(100), transform=transform)
    data = {
        "a": torch.randn(3),
        "b": {"c": (torch.zeros(2), [torch.ones(1)])},
        30: -torch.ones(()),
    }
    rb.add(data)
    s = rb.sample(10)
    assert s["a"].shape == (10, 3)
    assert isinstance(s["b"]["c"], tuple) and isinstance(s["b"]["c"][1], list)
    assert s[30].shape == (10,)

    def assert0(x):
        assert (x == 0).all()

    tree_map(assert0, s)


def test_append_transform_invert_example():
    rb = ReplayBuffer(storage=LazyMemmapStorage(10), batch_size=4)
    data = TensorDict({"a": torch.zeros(10)}, [10])

    def t(data):
        data += 1
        return data

    rb.append_transform(t, invert=True)
    rb.extend(data)
    assert (data == 1).all()
    assert (rb[:]["a"] == 1).all()


def test_dim_extend_example():
    data = torch.zeros(3, 4)
    rb1 = ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), dim_extend=1)
    for d in data.unbind(1):
        rb1.add(d)
    rb2 = ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), dim_extend=1)
    rb2.extend(data)
    # 4 columns of 3 cells: ceil(10 / 3) = 4 fit (torchrl rounds the capacity along dim 0 up)
    assert len(rb1) == len(rb2) == 12
    assert torch.equal(rb1[:], rb2[:])
    assert rb2.sample(5).shape == (5,)


def test_dumps_loads_prioritized_example():
    size = 1000
    sampler = PrioritizedSampler(size, 1.1, 1.0)
    storage = LazyMemmapStorage(size)
    rb = TensorDictReplayBuffer(storage=storage, sampler=sampler)
    for _ in range(5):
        td = TensorDict(
            {
                "obs": torch.randn(100, 3, 4),
                "next": {"obs": torch.randn(100, 3, 4)},
                "td_error": torch.rand(100),
            },
            [100],
        )
        rb.extend(td)
        sample = rb.sample(32)
        rb.update_tensordict_priority(sample)
    with tempfile.TemporaryDirectory() as tmpdir:
        rb.dumps(tmpdir)
        sampler = PrioritizedSampler(size, 1.1, 1.0)
        storage = LazyMemmapStorage(size)
        rb_load = TensorDictReplayBuffer(storage=storage, sampler=sampler)
        rb_load.loads(tmpdir)
        assert len(rb) == len(rb_load)
        assert (rb_load[:]["obs"] == rb[:]["obs"]).all()


def test_stats_example():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(5))
    snapshot = rb.stats()
    assert (snapshot["size"], snapshot["write_count"], snapshot["capacity"]) == (5, 5, 10)
    assert snapshot["utilization"] == 0.5 and snapshot["initialized"] is True
    assert snapshot["prefetch_queue_size"] == 0


def test_update_if_present_examples():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    )
    rb.extend(TensorDict({"obs": torch.zeros(10, 3)}, batch_size=[10]))
    sample = rb.sample()
    result = rb.update_if_present(
        index=sample["index"],
        generation=sample["index_generation"],
        patch={"obs": torch.ones(4, 3)},
    )
    assert (result.updated_count, result.stale_count) == (4, 0)
    assert (rb[:]["obs"][sample["index"]] == 1).all()

    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    )
    rb.extend(
        TensorDict(
            {"obs": torch.zeros(10, 3), "v": torch.full((10,), 5, dtype=torch.int64)},
            batch_size=[10],
        )
    )
    sample = rb.sample()
    result = rb.update_if_present(
        index=sample["index"],
        generation=sample["index_generation"],
        patch={"obs": torch.ones(4, 3)},
        version_key="v",
        version=4,
        require_newer=True,
    )
    assert (result.updated_count, result.version_rejected_count) == (0, 4)
    assert (rb[:]["obs"] == 0).all()


def test_policy_age_filter_example():
    current_version = 3
    rb = ReplayBuffer(
        storage=LazyStackStorage(100),
        transform=PolicyAgeFilter(lambda: current_version, max_policy_lag=1),
    )
    data = TensorDict(
        {"observation": torch.randn(4, 3), "policy_version": torch.tensor([0, 2, 2, 3])},
        batch_size=[4],
    )
    rb.extend(data)
    assert len(rb) == 3
    sample = rb.sample(3)
    assert sample.batch_size[0] == 3


def test_query_example():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
    episodes, rewards = [], []
    for ep, (length, r) in enumerate([(60, 2.0), (40, 5.0), (80, 0.5), (55, 3.0)]):
        episodes.append(torch.full((length,), ep))
        rewards.append(torch.full((length,), r))
    episode = torch.cat(episodes)
    done = torch.zeros(len(episode), 1, dtype=torch.bool)
    ends = torch.cumsum(torch.tensor([60, 40, 80, 55]), 0) - 1
    done[ends] = True
    td = TensorDict(
        {
            "observation": torch.arange(len(episode)).float().unsqueeze(-1),
            "episode": episode,
            "next": {"reward": torch.cat(rewards).unsqueeze(-1), "done": done},
        },
        [len(episode)],
    )
    rb.extend(td)
    good_trajs = rb.query((traj.reward.sum() > 100) & (traj.length >= 50))
    assert [len(t) for t in good_trajs] == [60, 55]
    observations = good_trajs[0].observation
    assert observations.shape == (60, 1)
