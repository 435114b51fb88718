"""query(): trajectories as Trajectory views, the traj predicate DSL, trajectory_key."""

from __future__ import annotations

import pytest
import torch

from ._describe import contents, describe, outcome
from ._instances import episodes
from ._libs import parity_gap


def _buffer(ns, n=12, capacity=12):
    rb = ns.TensorDictReplayBuffer(storage=ns.LazyTensorStorage(capacity), batch_size=4)
    data = episodes(n)
    data["next", "reward"] = torch.arange(float(n))[:, None]
    rb.extend(data)
    return rb


def test_query_returns_trajectories_oldest_first(lib):
    found = _buffer(lib).query()
    assert type(found) is list
    assert [type(t).__name__ for t in found] == ["Trajectory"] * 3
    assert [t.observation[0, 0].item() for t in found] == [0.0, 4.0, 8.0]


def test_trajectory_entries_fall_back_to_next(lib):
    t = _buffer(lib).query()[1]
    assert describe(t.observation) == ("Tensor", (4, 3), "torch.float32")
    assert contents(t.reward) == [[4.0], [5.0], [6.0], [7.0]]
    assert describe(t.done) == ("Tensor", (4, 1), "torch.bool")


@pytest.mark.parametrize(
    "member,expected",
    [
        ("length", 4),
        ("batch_size", torch.Size([4])),
        ("total_reward", 22.0),
    ],
)
def test_trajectory_properties(lib, request, member, expected):
    parity_gap(request, lib, f"Trajectory.{member} missing (AttributeError)")
    t = _buffer(lib).query()[1]
    value = getattr(t, member)
    assert (value.item() if isinstance(value, torch.Tensor) else value) == expected


def test_trajectory_get_and_keys(lib, request):
    parity_gap(request, lib, "Trajectory.get / Trajectory.keys missing")
    t = _buffer(lib).query()[1]
    assert (
        contents(t.get("reward"))
        == contents(t.get(("next", "reward")))
        == [[4.0], [5.0], [6.0], [7.0]]
    )
    assert {"action", "next", "observation"} <= set(t.keys())


def test_trajectory_slicing_gives_a_trajectory(lib, request):
    parity_gap(
        request, lib, "Trajectory[:k] raises TypeError (torchrl: a Trajectory, it is a tensorclass)"
    )
    part = _buffer(lib).query()[1][:2]
    assert (type(part).__name__, part.observation.shape[0]) == ("Trajectory", 2)


def test_trajectory_data(lib):
    data = _buffer(lib).query()[1].data
    assert {"action", "episode", "observation", "next"} <= set(data.keys())
    assert tuple(data.batch_size) == (4,)


@pytest.mark.parametrize(
    "make,count",
    [
        (lambda traj: (traj.length >= 4) & (traj.reward.max() > 8), 1),
        (lambda traj: traj.reward.sum() > 10, 2),
        (lambda traj: lambda t: t.reward.sum() > 20, 2),
    ],
    ids=["length-and-max", "sum", "callable"],
)
def test_predicates(lib, make, count):
    assert len(_buffer(lib).query(make(lib.traj))) == count


def test_total_reward_predicate(lib, request):
    parity_gap(request, lib, "traj.total_reward in a predicate raises TypeError")
    assert len(_buffer(lib).query(lib.traj.total_reward > 10)) == 2


def test_required_keys(lib):
    assert sorted(map(str, (lib.traj.reward.sum() > 1).required_keys())) == ["reward"]


def test_trajectory_key(lib):
    assert len(_buffer(lib).query(trajectory_key="episode")) == 3


def test_query_across_the_wrap_point(lib):
    rb = lib.TensorDictReplayBuffer(storage=lib.LazyTensorStorage(12), batch_size=4)
    rb.extend(episodes(16)[:14])
    found = rb.query()
    assert [t.observation.shape[0] for t in found] == [2, 4, 4, 2]
    assert [t.observation[0, 0].item() for t in found] == [2.0, 4.0, 8.0, 12.0]


def test_query_of_an_empty_buffer(lib):
    assert lib.TensorDictReplayBuffer(storage=lib.LazyTensorStorage(12)).query() == []


def test_query_of_plain_tensors_is_a_type_error(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(12))
    rb.extend(torch.arange(12))
    assert outcome(rb.query) == ("raises", "TypeError")


def test_query_over_a_list_storage(lib):
    rb = lib.ReplayBuffer(storage=lib.ListStorage(12))
    rb.extend(episodes())
    assert len(rb.query()) == 3
