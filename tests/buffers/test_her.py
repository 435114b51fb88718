"""HERReplayBuffer: goal relabeling as torchrl 0.14.1's (its test_her.py passes via the shim)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import HERReplayBuffer, HindsightStrategy, LazyTensorStorage, ListStorage


def _episodes(lengths: list[int]) -> TensorDict:
    """Steps whose achieved goal is ``[slot, episode]``; the desired goal is -1."""
    n = sum(lengths)
    episode = torch.cat([torch.full((k,), i) for i, k in enumerate(lengths)])
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[torch.tensor(lengths).cumsum(0) - 1] = True
    achieved = torch.stack([torch.arange(n), episode], -1).float()
    return TensorDict(
        {
            "desired_goal": torch.full((n, 2), -1.0),
            "achieved_goal": achieved,
            "next": {
                "desired_goal": torch.full((n, 2), -1.0),
                "reward": torch.zeros(n, 1),
                "done": done,
            },
        },
        batch_size=[n],
    )


def _reward(td: TensorDict) -> torch.Tensor:
    return (td["achieved_goal"] == td["desired_goal"]).all(-1, keepdim=True).float()


def _buffer(strategy: str, ratio: float = 1.0, size: int = 100) -> HERReplayBuffer:
    rb = HERReplayBuffer(
        _reward, her_ratio=ratio, strategy=strategy, storage=LazyTensorStorage(size), batch_size=64
    )
    rb.extend(_episodes([3, 5, 2, 6]))
    return rb


@pytest.mark.parametrize("strategy", ["future", "final", "episode", "random"])
def test_relabeled_goals_follow_the_strategy(strategy):
    torch.manual_seed(0)
    rb = _buffer(strategy)
    ends = torch.tensor([2, 7, 9, 15])
    for _ in range(5):
        batch = rb.sample()
        index = batch["index"]
        goal = batch["desired_goal"]
        assert torch.equal(goal, batch["next", "desired_goal"])
        source, episode = goal[:, 0].long(), goal[:, 1].long()
        own_episode = rb[index]["achieved_goal"][:, 1].long()
        end = ends[own_episode]
        if strategy == "final":
            assert torch.equal(source, end)
        elif strategy == "future":
            assert (source >= index).all() and (source <= end).all()
        elif strategy == "episode":
            assert (episode == own_episode).all()
        else:
            assert ((source >= 0) & (source < 16)).all()
        assert torch.equal(batch["next", "reward"], _reward(batch))
    assert (rb[:]["desired_goal"] == -1).all()  # the stored goals never change


def test_ratio_keeps_the_tail_of_the_batch():
    rb = _buffer("final", ratio=0.25)
    batch = rb.sample(8)
    assert (batch["desired_goal"][2:] == -1).all() and (batch["desired_goal"][:2] >= 0).all()
    assert (batch["next", "reward"][2:] == 0).all()
    untouched = _buffer("final", ratio=0.0).sample(8)
    assert (untouched["desired_goal"] == -1).all()


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="her_ratio"):
        HERReplayBuffer(_reward, her_ratio=1.5)
    with pytest.raises(ValueError, match="strategy"):
        HERReplayBuffer(_reward, strategy="past")
    with pytest.raises(TypeError, match="reward_fn"):
        HERReplayBuffer(None)
    assert HERReplayBuffer(_reward, strategy=HindsightStrategy.EPISODE).strategy == "episode"


def test_missing_keys_are_key_errors():
    rb = HERReplayBuffer(_reward, storage=LazyTensorStorage(10), batch_size=2)
    rb.extend(TensorDict({"x": torch.zeros(3), ("next", "done"): torch.ones(3, 1).bool()}, [3]))
    with pytest.raises(KeyError, match="goal_key"):
        rb.sample()
    rb = HERReplayBuffer(_reward, storage=LazyTensorStorage(10), batch_size=2)
    rb.extend(_episodes([3]).exclude(("next", "done")))
    with pytest.raises(KeyError, match="terminated"):
        rb.sample()


def test_a_full_ring_ends_an_episode_at_its_newest_slot():
    torch.manual_seed(0)
    rb = HERReplayBuffer(
        _reward, her_ratio=1.0, strategy="final", storage=LazyTensorStorage(8), batch_size=32
    )
    data = _episodes([4, 6])  # 10 steps into 8 slots: slots 0, 1 hold steps 8, 9
    rb.extend(data)
    batch = rb.sample()
    source = batch["desired_goal"][:, 0].long()
    # slots 0-1 end at slot 1 (the newest), slots 2-3 at 3, slots 4-7 at 7
    expected = torch.tensor([1, 1, 3, 3, 7, 7, 7, 7])[batch["index"]]
    assert torch.equal(rb[expected]["achieved_goal"], batch["desired_goal"])
    assert source.numel() == 32


def test_state_round_trips_with_the_episode_cache(tmp_path):
    rb = _buffer("final")
    rb.sample()
    state = rb.state_dict()
    assert state["_her"]["strategy"] == "final" and state["_her"]["episode_ends_cache"] is not None
    other = HERReplayBuffer(_reward, storage=LazyTensorStorage(100), batch_size=64)
    other.load_state_dict(state)
    assert other.state_dict()["_her"]["last_cache_key"] == state["_her"]["last_cache_key"]
    rb.dumps(tmp_path)
    again = HERReplayBuffer(_reward, storage=LazyTensorStorage(100), batch_size=64)
    again.loads(tmp_path)
    assert len(again) == 16
    rb.empty()
    assert rb.state_dict()["_her"]["episode_ends_cache"] is None


def test_list_storage_items_are_relabeled_too():
    rb = HERReplayBuffer(_reward, her_ratio=1.0, strategy="final", storage=ListStorage(50))
    rb.extend(_episodes([2, 2]))
    batch = rb.sample(4)
    assert (batch["desired_goal"][:, 0] % 2 == 1).all()
