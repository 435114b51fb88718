"""Tests of the Trajectory tensorclass view."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict, lazy_stack

from rbdata import Trajectory


def transitions(n: int, first: int = 0) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.arange(first, first + n, dtype=torch.float32).unsqueeze(-1),
            "action": torch.zeros(n, 2),
            "next": {"reward": torch.ones(n, 1), "done": torch.zeros(n, 1, dtype=torch.bool)},
        },
        [n],
    )


def test_construction_takes_the_batch_size_from_the_data():
    data = transitions(5)
    t = Trajectory(data)
    assert t.length == len(t) == 5 and t.batch_size == torch.Size([5])
    assert t.data is data and t.td is data and t.index is None
    indexed = Trajectory(data, torch.arange(10, 15))
    assert indexed.index.tolist() == [10, 11, 12, 13, 14]
    assert Trajectory(data=data, batch_size=[5]).length == 5


def test_construction_errors():
    with pytest.raises(ValueError, match="single batch dimension"):
        Trajectory(transitions(4).reshape(2, 2))
    with pytest.raises(TypeError, match="must be a TensorDict"):
        Trajectory(torch.zeros(3))
    with pytest.raises(IndexError, match="no length"):
        _ = Trajectory(transitions(3))[0].length


def test_entries_as_attributes_with_next_fallback():
    t = Trajectory(transitions(4))
    assert t.observation.shape == (4, 1) and t.action.shape == (4, 2)
    assert torch.equal(t.reward, t.data["next", "reward"])  # falls back to ("next", "reward")
    assert torch.equal(t.done, t.data["next", "done"])
    assert torch.equal(t.get("reward"), t.reward)
    assert t.get("pixels") is None and t.get("pixels", 0) == 0
    assert torch.equal(t.total_reward, torch.tensor(4.0))
    assert set(t.keys()) == {"observation", "action", "next"}
    with pytest.raises(AttributeError, match="no entry 'pixels'"):
        _ = t.pixels
    with pytest.raises(AttributeError):
        _ = t._private


def test_fields_and_methods_take_precedence_over_entries():
    data = transitions(3)
    data["index"] = torch.full((3,), 7)
    data["clone"] = torch.zeros(3)
    t = Trajectory(data, torch.arange(3))
    assert t.index.tolist() == [0, 1, 2] and t["index"].tolist() == [7, 7, 7]
    assert isinstance(t.clone(), Trajectory)


def test_keys_read_entries_and_rows_give_trajectories():
    t = Trajectory(transitions(5), torch.arange(20, 25))
    assert t["observation"].shape == (5, 1)
    assert t["next", "done"].shape == (5, 1)
    part = t[1:4]
    assert isinstance(part, Trajectory) and part.length == 3
    assert part.index.tolist() == [21, 22, 23]
    assert part.observation.view(-1).tolist() == [1.0, 2.0, 3.0]
    assert isinstance(t[0], Trajectory) and t[0].batch_size == torch.Size([])
    picked = t[torch.tensor([True, False, True, False, False])]
    assert picked.index.tolist() == [20, 22]
    assert repr(part) == "Trajectory(length=3, keys=['action', 'next', 'observation'])"


def test_tensorclass_operations_keep_the_type():
    t = Trajectory(transitions(5), torch.arange(5))
    for out in (t.clone(), t.to("cpu"), torch.cat([t, t]), torch.stack([t, t])):
        assert isinstance(out, Trajectory)
    assert torch.cat([t, t]).length == 10
    assert torch.stack([t, t]).batch_size == torch.Size([2, 5])


def test_lazy_stack_of_different_lengths():
    first, second = Trajectory(transitions(5)), Trajectory(transitions(3, first=10))
    stacked = lazy_stack([first, second])
    assert isinstance(stacked, Trajectory) and stacked.batch_size == torch.Size([2, -1])
    assert isinstance(stacked[1], Trajectory) and stacked[1].length == 3
    assert torch.equal(stacked[0].reward, first.reward)
    assert stacked[1].observation.view(-1).tolist() == [10.0, 11.0, 12.0]
    assert repr(stacked).startswith("Trajectory(batch_size=(2, -1), keys=")
