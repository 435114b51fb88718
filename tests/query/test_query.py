"""Tests of trajectory queries: run_query, iter_trajectories, filter_trajectories and the DSL."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    Compose,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PolicyAgeFilter,
    ReplayBuffer,
    TensorDictReplayBuffer,
    Trajectory,
    TrajectoryPredicate,
    Transform,
    filter_trajectories,
    iter_trajectories,
    traj,
)
from rbdata.query import run_query


def ted(episode: torch.Tensor, reward: torch.Tensor, first_step: int = 0) -> TensorDict:
    """Transitions in the TED layout (reward and done under "next")."""
    n = episode.numel()
    done = torch.cat([episode[1:] != episode[:-1], torch.tensor([True])]).view(n, 1)
    return TensorDict(
        {
            "observation": torch.arange(first_step, first_step + n, dtype=torch.float32),
            "episode": episode,
            "next": {"reward": reward.view(n, 1).float(), "done": done},
        },
        [n],
    )


def storage_with(data: TensorDict, capacity: int = 100) -> LazyTensorStorage:
    storage = LazyTensorStorage(capacity)
    storage.set(torch.arange(data.shape[0]), data)
    return storage


class Spy:
    """A storage proxy recording what is read."""

    def __init__(self, storage) -> None:
        self._storage = storage
        self.leaves: list = []
        self.rows = 0

    def __getattr__(self, name):
        return getattr(self._storage, name)

    def __len__(self) -> int:
        return len(self._storage)

    def get_leaf(self, key):
        self.leaves.append(key)
        return self._storage.get_leaf(key)

    def get(self, index):
        self.rows += index.numel()
        return self._storage.get(index)


def episodes(*lengths: int) -> torch.Tensor:
    return torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])


# ------------------------------------------------------------------ the reference example
def test_reference_example_through_the_buffer():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
    lengths, rewards = [60, 40, 80, 55], [2.0, 5.0, 1.0, 0.5]
    for i, (n, r) in enumerate(zip(lengths, rewards, strict=True)):
        rb.extend(ted(torch.full((n,), i), torch.full((n,), r), first_step=sum(lengths[:i])))
    good = rb.query((traj.reward.sum() > 100) & (traj.length >= 50))
    assert [int(t.episode[0]) for t in good] == [0]  # 120 over 60; 200 over 40 is too short
    observations = good[0].observation
    assert torch.equal(observations, torch.arange(60, dtype=torch.float32))
    assert len(rb.query()) == 4
    assert [len(t) for t in rb.query(traj.length < 60)] == [40, 55]


def test_query_through_a_plain_buffer_after_wrap_around():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(ted(episodes(4, 4), torch.ones(8)))
    rb.extend(ted(episodes(5) + 2, torch.ones(5), first_step=8))  # slots 8, 9, 0, 1, 2
    found = rb.query()
    assert [t.observation.tolist() for t in found] == [[3.0], [4.0, 5, 6, 7], [8.0, 9, 10, 11, 12]]
    assert found[2].index.tolist() == [8, 9, 0, 1, 2]


# ------------------------------------------------------------------ run_query
def test_chronological_order_and_wrap_around():
    storage = LazyTensorStorage(8)
    storage.set(torch.arange(8), ted(episodes(3, 5), torch.zeros(8)))
    storage.set(torch.tensor([0, 1, 2]), ted(torch.full((3,), 7), torch.zeros(3), first_step=8))
    found = run_query(storage, cursor=3)
    assert [t.observation.tolist() for t in found] == [[3.0, 4, 5, 6, 7], [8.0, 9, 10]]
    storage.set(torch.tensor([3, 4]), ted(torch.full((2,), 7), torch.zeros(2), first_step=11))
    found = run_query(storage, cursor=5)  # episode 7 continues; episode 1 lost its head
    assert [t.index.tolist() for t in found] == [[5, 6, 7], [0, 1, 2, 3, 4]]


def test_trajectory_key_detection():
    data = ted(episodes(2, 2, 2), torch.zeros(6))
    data["collector", "traj_ids"] = torch.tensor([0, 0, 0, 1, 1, 1])
    storage = storage_with(data)
    assert [len(t) for t in run_query(storage)] == [3, 3]
    assert [len(t) for t in run_query(storage, trajectory_key="episode")] == [2, 2, 2]
    with pytest.raises(KeyError, match="trajectory_key .*nope.* is not stored"):
        run_query(storage, trajectory_key="nope")
    flags = storage_with(
        TensorDict({"x": torch.arange(5), "done": torch.tensor([0, 1, 0, 0, 1]).bool()}, [5])
    )
    with pytest.warns(UserWarning, match="end-of-episode flags"):
        assert [len(t) for t in run_query(flags)] == [2, 3]
    nested = TensorDict(
        {
            "next": {
                "terminated": torch.tensor([1, 0, 0]).bool(),
                "truncated": torch.tensor([0, 1, 0]).bool(),
            }
        },
        [3],
    )
    with pytest.warns(UserWarning, match="end-of-episode flags"):
        assert [len(t) for t in run_query(storage_with(nested))] == [1, 1, 1]
    with pytest.raises(KeyError, match="Cannot split data into trajectories"):
        run_query(storage_with(TensorDict({"x": torch.arange(3)}, [3])))


def test_only_required_keys_are_read():
    data = ted(episodes(3, 4, 5), torch.tensor([1.0] * 7 + [3.0] * 5))
    data["pixels"] = torch.zeros(12, 3, 8, 8)
    spy = Spy(storage_with(data))
    predicate = traj.reward.max() > 2
    assert predicate.required_keys() == {"reward"}
    found = run_query(spy, predicate=predicate)
    assert [len(t) for t in found] == [5]
    assert set(spy.leaves) == {"episode", ("next", "reward")}
    assert spy.rows == 5  # only the matching trajectory is read in full
    assert found[0]["pixels"].shape == (5, 3, 8, 8)


def test_transforms_apply_to_predicates_and_results():
    data = ted(episodes(3, 3), torch.tensor([1.0, 1, 1, 5, 5, 5]))

    def scale(td):
        td["next", "reward"] = td["next", "reward"] * 10
        return td

    found = run_query(
        storage_with(data), transform=Compose(scale), predicate=traj.reward.sum() > 20
    )
    assert [t.reward.view(-1).tolist() for t in found] == [[10.0] * 3, [50.0] * 3]
    seen = []

    def opaque(trajectory: Trajectory) -> bool:
        seen.append(trajectory.reward.sum().item())
        return trajectory.reward.sum().item() > 100

    found = run_query(storage_with(data), transform=scale, predicate=opaque)
    assert seen == [30.0, 150.0] and len(found) == 1
    assert run_query(storage_with(data), transform=Compose(), predicate=traj.length == 3)


def test_row_filtering_transform():
    data = ted(episodes(4, 4), torch.zeros(8))
    data["fresh"] = torch.tensor([1, 1, 0, 0, 0, 0, 0, 0]).bool()

    def keep_fresh(td):
        return td[td["fresh"]]

    found = run_query(storage_with(data), transform=keep_fresh, predicate=traj.length >= 1)
    assert [t.observation.tolist() for t in found] == [[0.0, 1.0]]
    assert found[0].index.tolist() == [0, 1]
    assert len(run_query(storage_with(data), transform=keep_fresh)) == 1


# ------------------------------------------------------------------ the DSL
@given(
    st.lists(st.lists(st.integers(-3, 3), min_size=1, max_size=6), min_size=1, max_size=6),
    st.integers(-4, 8),
)
def test_reductions_match_python(trajectories, threshold):
    episode = torch.cat([torch.full((len(r),), i) for i, r in enumerate(trajectories)])
    reward = torch.tensor([x for r in trajectories for x in r])
    storage = storage_with(ted(episode, reward))
    cases = [
        (traj.reward.sum() > threshold, lambda r: sum(r) > threshold),
        (traj.reward.mean() <= threshold / 2, lambda r: sum(r) / len(r) <= threshold / 2),
        (traj.reward.max() >= threshold, lambda r: max(r) >= threshold),
        (traj.reward.min() < threshold, lambda r: min(r) < threshold),
        (traj.reward.first() == threshold, lambda r: r[0] == threshold),
        (traj.reward.last() != threshold, lambda r: r[-1] != threshold),
        ((traj.reward > threshold).any(), lambda r: any(x > threshold for x in r)),
        ((traj.reward > threshold).all(), lambda r: all(x > threshold for x in r)),
        (traj.length >= threshold, lambda r: len(r) >= threshold),
        ((traj.reward.sum() > 0) | ~(traj.length > 2), lambda r: sum(r) > 0 or not len(r) > 2),
        ((traj.reward > traj.reward.mean()).any(), lambda r: any(x > sum(r) / len(r) for x in r)),
        (traj.reward.max() > traj.reward.min(), lambda r: max(r) > min(r)),
    ]
    data = ted(episode, reward)
    for predicate, expected in cases:
        found = run_query(storage, predicate=predicate)
        want = [i for i, r in enumerate(trajectories) if expected(r)]
        assert [int(t.episode[0]) for t in found] == want, predicate
        for t in found:
            assert predicate(t) is True
        kept = filter_trajectories(data, predicate)
        assert [int(t.episode[0]) for t in kept] == want, predicate
        one_by_one = [t for t in iter_trajectories(data) if predicate(t)]
        assert [t.index.tolist() for t in one_by_one] == [t.index.tolist() for t in kept]


def test_predicate_representation_and_keys():
    predicate = (traj.reward.sum() > 100) & ~(traj["next", "done"].any()) | (traj.length < 3)
    assert isinstance(predicate, TrajectoryPredicate)
    assert predicate.required_keys() == frozenset({"reward", ("next", "done")})
    assert repr(traj.reward.sum() > 100) == "TrajectoryPredicate((traj.reward.sum() > 100))"
    assert repr(predicate) == (
        "TrajectoryPredicate((((traj.reward.sum() > 100) & ~traj[('next', 'done')].any()) "
        "| (traj.length < 3)))"
    )
    assert predicate(
        TensorDict({"reward": torch.ones(2), "next": {"done": torch.zeros(2, 1)}}, [2])
    )


def test_dsl_errors():
    storage = storage_with(ted(episodes(2, 2), torch.ones(4)))
    with pytest.raises(TypeError, match="not a bool"):
        bool(traj.length > 2)
    with pytest.raises(TypeError, match="not a condition on trajectories"):
        run_query(storage, predicate=traj.reward > 2)
    with pytest.raises(TypeError, match="combines trajectory predicates"):
        (traj.length > 1) & 3
    with pytest.raises(TypeError, match="callable"):
        run_query(storage, predicate=3)
    with pytest.raises(KeyError, match="no entry .*value"):
        run_query(storage, predicate=traj.value.sum() > 0)
    with pytest.raises(ValueError, match="values per trajectory"):
        run_query(
            storage_with(TensorDict({"episode": torch.zeros(2), "obs": torch.zeros(2, 3)}, [2])),
            predicate=traj.obs.first() > 0,
        )
    with pytest.raises(AttributeError):
        _ = traj._private


def test_trajectory_view():
    found = run_query(storage_with(ted(episodes(3), torch.tensor([1.0, 2.0, 3.0]))))
    t = found[0]
    assert len(t) == 3 and t.td is t.data and t.data.batch_size == (3,)
    assert t.reward.view(-1).tolist() == [1.0, 2.0, 3.0]  # falls back to ("next", "reward")
    assert torch.equal(t["next", "reward"], t.reward)
    assert t.index.tolist() == [0, 1, 2]
    assert "length=3" in repr(t)
    with pytest.raises(AttributeError, match="no entry 'missing'"):
        _ = t.missing


def test_empty_storage():
    assert run_query(LazyTensorStorage(5), predicate=traj.length > 0) == []


def test_multi_dimensional_storage_groups_by_coordinate():
    storage = LazyTensorStorage(12, ndim=2)  # 4 steps of 3 environments
    episode = torch.tensor([[0, 10, 20], [0, 10, 21], [1, 10, 21], [1, 11, 21]])
    step = torch.arange(4).unsqueeze(1).expand(4, 3)
    storage.set(slice(0, 4), TensorDict({"episode": episode, "step": step}, [4, 3]))
    found = run_query(storage)
    assert [t.episode.tolist() for t in found] == [
        [0, 0],
        [1, 1],
        [10, 10, 10],
        [11],
        [20],
        [21, 21, 21],
    ]
    assert [t.step.tolist() for t in found][2] == [0, 1, 2]
    assert found[2].index.tolist() == [1, 4, 7]


@pytest.mark.parametrize("storage", [ListStorage(20), LazyStackStorage(20)])
def test_list_storages(storage):
    rb = ReplayBuffer(storage=storage)
    rb.extend(TensorDict({"episode": torch.tensor([0, 0, 1, 1, 1]), "r": torch.arange(5.0)}, [5]))
    found = rb.query(traj.r.sum() > 2)
    assert [t.r.tolist() for t in found] == [[2.0, 3.0, 4.0]]


def test_query_applies_the_buffer_transforms():
    version = [1]
    transform = PolicyAgeFilter(lambda: version[0], 1)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(50), transform=transform)
    data = ted(episodes(3, 3), torch.ones(6))
    data["policy_version"] = torch.tensor([1, 1, 1, 0, 1, 1])
    rb.extend(data)
    version[0] = 2  # the row of version 0 is now too old to be read
    found = rb.query(traj.length >= 2)
    assert [t.observation.tolist() for t in found] == [[0.0, 1.0, 2.0], [4.0, 5.0]]
    assert [t.index.tolist() for t in found] == [[0, 1, 2], [4, 5]]


class Counting(Transform):
    """Scales one entry and counts its calls (declares what it reads and writes)."""

    def __init__(self, key, factor: float = 2.0, declared: bool = True) -> None:
        super().__init__(in_keys=[key], out_keys=[key]) if declared else super().__init__()
        self.key, self.factor, self.calls = key, factor, 0

    def forward(self, data):
        self.calls += 1
        data[self.key] = data[self.key] * self.factor
        return data


def test_evaluation_runs_only_the_transforms_the_predicate_depends_on():
    obs = Counting("observation")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), transform=obs)
    rb.extend(ted(episodes(5, 3, 7), torch.tensor([1.0] * 8 + [3.0] * 7)))
    assert rb.query(traj.reward.sum() > 100) == [] and obs.calls == 0
    found = rb.query(traj.reward.sum() > 10)
    assert [len(t) for t in found] == [7] and obs.calls == 1  # only the result is transformed
    assert found[0].observation.tolist() == [2.0 * x for x in range(8, 15)]
    assert len(rb.query(traj.observation.max() > 20)) == 1 and obs.calls == 3  # now it matters
    assert len(rb.query(lambda t: t.length > 4)) == 2 and obs.calls == 4  # once, for everything

    reward = Counting(("next", "reward"), factor=10.0)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), transform=Compose(reward, obs))
    rb.extend(ted(episodes(5, 3, 7), torch.tensor([1.0] * 8 + [3.0] * 7)))
    obs.calls = 0
    assert [len(t) for t in rb.query(traj.reward.sum() > 25)] == [5, 3, 7]
    assert reward.calls == 2 and obs.calls == 1  # obs runs on the results only
    undeclared = Counting("observation", declared=False)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), transform=undeclared)
    rb.extend(ted(episodes(5, 3), torch.ones(8)))
    assert len(rb.query(traj.length > 4)) == 1 and undeclared.calls == 2  # unknown effects


def test_query_refuses_storages_without_single_tensordict_transitions():
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend([1, 2, 3])
    with pytest.raises(TypeError, match="tensordict-backed"):
        rb.query()
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.add(ted(episodes(3), torch.ones(3)))  # one item holding three transitions
    with pytest.raises(TypeError, match="single-transition items"):
        rb.query()


def test_query_of_a_buffer_extended_with_batch_by_time_data():
    ids = torch.tensor([[0, 0, 0, 1, 1, 1], [2, 2, 2, 2, 3, 3]])
    data = TensorDict(
        {
            "observation": torch.arange(12).view(2, 6),
            "next": {"reward": (ids.float() + 1).unsqueeze(-1)},
            "collector": {"traj_ids": ids},
        },
        [2, 6],
    )
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(12, ndim=2))
    rb.extend(data)  # stored time-first: [6, 2]
    found = rb.query()
    assert [t.observation.tolist() for t in found] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9], [10, 11]]
    assert [t.length for t in rb.query(traj.reward.first() == 3.0)] == [4]


# ------------------------------------------------------------------ TensorDict helpers
def test_iter_trajectories_splits_on_ids_or_end_flags():
    data = ted(episodes(5, 3, 7), torch.zeros(15))
    views = list(iter_trajectories(data))
    assert [t.length for t in views] == [5, 3, 7]
    assert views[1].index.tolist() == [5, 6, 7]
    views[1].observation[0] = -1.0  # views share the data's memory
    assert data["observation"][5] == -1.0
    flags = data.exclude("episode")
    flags["next", "done"][-1] = False  # the last row ends a trajectory anyway
    with pytest.warns(UserWarning, match="end-of-episode"):
        assert [t.length for t in iter_trajectories(flags)] == [5, 3, 7]
    renamed = data.exclude("episode", ("next", "done")).set("run", data["episode"])
    assert [t.length for t in iter_trajectories(renamed, trajectory_key="run")] == [5, 3, 7]
    assert list(iter_trajectories(data[:0])) == []


def test_iter_trajectories_errors_when_iterated():
    with pytest.raises(TypeError, match="TensorDictBase"):
        list(iter_trajectories(torch.zeros(3)))
    with pytest.raises(ValueError, match="single batch dimension"):
        list(iter_trajectories(ted(episodes(4), torch.zeros(4)).reshape(2, 2)))
    with pytest.raises(KeyError, match="trajectory_key"):
        list(iter_trajectories(ted(episodes(4), torch.zeros(4)), trajectory_key="nope"))
    with pytest.raises(KeyError, match="Cannot split data into trajectories"):
        list(iter_trajectories(TensorDict({"x": torch.zeros(3)}, [3])))


def test_filter_trajectories_predicates():
    data = ted(episodes(5, 3, 7), torch.tensor([1.0] * 5 + [2.0] * 3 + [3.0] * 7))
    assert [t.length for t in filter_trajectories(data)] == [5, 3, 7]
    assert [t.length for t in filter_trajectories(data, traj.total_reward > 6)] == [7]
    assert [t.length for t in filter_trajectories(data, lambda t: t.length == 3)] == [3]
    kept = filter_trajectories(data, (traj["episode"] == 1).all(), trajectory_key="episode")
    assert [t.index.tolist() for t in kept] == [[5, 6, 7]]
    with pytest.raises(TypeError, match=r"\.any\(\) or \.all\(\)"):
        filter_trajectories(data, traj.reward > 2.5)
    with pytest.raises(TypeError, match="callable"):
        filter_trajectories(data, 3)
