"""Tests of the query language: traj expressions and TrajectoryPredicate."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, Trajectory, TrajectoryPredicate, traj
from rbdata.query import run_query


class Spy:
    """A storage proxy recording which entries are read as columns and how many rows in full."""

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


def storage_of(**entries: torch.Tensor) -> LazyTensorStorage:
    n = next(iter(entries.values())).shape[0]
    storage = LazyTensorStorage(50)
    data = TensorDict({}, [n])
    for name, value in entries.items():
        data[tuple(name.split("__"))] = value
    storage.set(torch.arange(n), data)
    return storage


EPISODE = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
REWARD = torch.tensor([1.0, 1, 1, 5, 5, 0, 0, 0, 9]).unsqueeze(-1)


def test_item_keys_fall_back_to_next_like_attributes():
    storage = storage_of(episode=EPISODE, next__reward=REWARD)
    by_item = run_query(storage, predicate=traj["reward"].sum() > 5)
    by_attribute = run_query(storage, predicate=traj.reward.sum() > 5)
    assert [t.length for t in by_item] == [t.length for t in by_attribute] == [2, 4]
    assert (traj["reward"].sum() > 5).required_keys() == frozenset({"reward"})
    assert repr(traj["reward"]) == "traj['reward']" and repr(traj.reward) == "traj.reward"
    nested = traj["next", "reward"].max() > 8
    assert [t.length for t in run_query(storage, predicate=nested)] == [4]
    assert nested.required_keys() == frozenset({("next", "reward")})


def test_total_reward():
    storage = storage_of(episode=EPISODE, next__reward=REWARD)
    predicate = traj.total_reward > 5
    assert repr(predicate) == "TrajectoryPredicate((traj.total_reward > 5))"
    assert predicate.required_keys() == frozenset({"reward"})
    assert [t.total_reward.item() for t in run_query(storage, predicate=predicate)] == [10.0, 9.0]


def test_wrapped_callables_with_declared_keys_read_only_those():
    spy = Spy(storage_of(episode=EPISODE, next__reward=REWARD, pixels=torch.zeros(9, 4, 4)))
    seen: list[list[str]] = []

    def high_start(t: Trajectory) -> bool:
        seen.append(sorted(map(str, t.keys(True, True))))
        return bool(t.reward[0] > 0)

    predicate = TrajectoryPredicate(high_start, "high start", keys=["reward"])
    assert repr(predicate) == "TrajectoryPredicate(high start)"
    assert predicate.required_keys() == frozenset({"reward"})
    found = run_query(spy, predicate=predicate & (traj.length < 3))
    assert [t.length for t in found] == [2]
    assert seen == [["('next', 'reward')"]] * 3  # called on each trajectory, with its keys only
    assert set(spy.leaves) == {"episode", ("next", "reward")} and spy.rows == 2
    assert found[0].pixels.shape == (2, 4, 4)  # results are read in full


def test_wrapped_callables_without_keys_see_everything():
    storage = storage_of(episode=EPISODE, next__reward=REWARD, pixels=torch.zeros(9, 4, 4))
    predicate = TrajectoryPredicate(lambda t: t.pixels.shape[0] == 4)
    assert predicate.required_keys() is None
    assert (predicate | (traj.length > 2)).required_keys() is None
    assert [t.length for t in run_query(storage, predicate=predicate)] == [4]
    either = run_query(storage, predicate=predicate | (traj.reward.sum() > 5))
    assert [t.index.tolist() for t in either] == [[3, 4], [5, 6, 7, 8]]
    again = TrajectoryPredicate(traj.length > 3)  # a predicate is reused as it is
    assert again.required_keys() == frozenset() and repr(again) == repr(traj.length > 3)
    one = Trajectory(TensorDict({"pixels": torch.zeros(4, 1)}, [4]))
    assert predicate(one) and again(one)


def test_predicates_called_on_one_trajectory():
    data = TensorDict({"next": {"reward": torch.tensor([1.0, 2.0, 3.0])}}, [3])
    assert (traj.reward.sum() == 6)(Trajectory(data))
    assert (traj.reward.sum() == 6)(data)
    assert not (traj.reward.first() > 1)(data)
    with pytest.raises(TypeError, match="applies to a Trajectory or a TensorDict"):
        (traj.length > 1)(torch.zeros(3))


def test_expression_errors():
    with pytest.raises(TypeError, match=r"reduce it with \.any\(\) or \.all\(\)"):
        (traj.reward > 1)(Trajectory(TensorDict({"reward": torch.ones(2)}, [2])))
    with pytest.raises(TypeError, match="not a condition on trajectories; compare it"):
        run_query(storage_of(episode=EPISODE), predicate=traj.reward.sum())
    with pytest.raises(TypeError, match="fn must be a callable"):
        TrajectoryPredicate(3)
    with pytest.raises(TypeError, match="fn must be a callable"):
        TrajectoryPredicate(traj.reward > 1)
    with pytest.raises(TypeError, match="description must be a str"):
        TrajectoryPredicate(bool, description=1)
    with pytest.raises(TypeError, match="keys must be a str"):
        TrajectoryPredicate(bool, keys=[1])
