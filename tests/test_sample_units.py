"""Tests of the sample units: Transition and Sequence windows with their masks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import LazyTensorStorage, ReplayBuffer, Sequence, TensorDictReplayBuffer, Transition


def make_storage(capacity: int, unit, *chunks: torch.Tensor, done=None):
    """Write episode-id chunks round-robin; ``step`` counts writes. Returns (storage, cursor)."""
    storage = LazyTensorStorage(capacity)
    cursor = steps = 0
    for chunk in chunks:
        n = chunk.numel()
        flags = torch.zeros(n, dtype=torch.bool) if done is None else done(chunk)
        data = TensorDict(
            {
                "episode": chunk,
                "step": torch.arange(steps, steps + n),
                "next": {"done": flags.view(n, 1)},
            },
            [n],
        )
        index = (torch.arange(n) + cursor) % capacity
        storage.set(index, data)
        unit.extend(index)
        cursor, steps = (cursor + n) % capacity, steps + n
    return storage, cursor


def test_transition_returns_its_input():
    anchors = torch.tensor([4, 0, 4])
    info = {"priority_weight": torch.ones(3)}
    index, out = Transition().expand(anchors, info, None)
    assert index is anchors and out is info


def test_sequence_windows_inside_a_trajectory():
    unit = Sequence(4, burn_in=2, bootstrap=1)
    storage, _ = make_storage(100, unit, torch.zeros(30, dtype=torch.long))
    index, info = unit.expand(torch.tensor([5, 10, 2]), {}, storage)
    assert index.shape == (3, 7)
    assert torch.equal(index, torch.tensor([3, 8, 0]).unsqueeze(1) + torch.arange(7))
    assert info["mask"].all()
    burn_in = torch.tensor([True, True, False, False, False, False, False])
    assert torch.equal(info["burn_in_mask"], burn_in.expand(3, 7))
    bootstrap = torch.tensor([False] * 6 + [True])
    assert torch.equal(info["bootstrap_mask"], bootstrap.expand(3, 7))


def test_sequence_clamps_and_masks_at_trajectory_edges():
    unit = Sequence(3, burn_in=2, bootstrap=1)
    episode = torch.cat([torch.zeros(5), torch.ones(6)]).long()  # slots 0..4 and 5..10
    storage, _ = make_storage(50, unit, episode)
    index, info = unit.expand(torch.tensor([5, 3, 10]), {}, storage)
    assert index.tolist() == [
        [5, 5, 5, 6, 7, 8],  # burn-in before the start of episode 1
        [1, 2, 3, 4, 4, 4],  # runs past the end of episode 0
        [8, 9, 10, 10, 10, 10],
    ]
    assert info["mask"].tolist() == [
        [False, False, True, True, True, True],
        [True, True, True, True, False, False],
        [True, True, True, False, False, False],
    ]


def test_sequence_dilation():
    unit = Sequence(3, burn_in=1, dilation=3)
    storage, _ = make_storage(50, unit, torch.zeros(12, dtype=torch.long))
    index, info = unit.expand(torch.tensor([3, 8]), {}, storage)
    assert index.tolist() == [[0, 3, 6, 9], [5, 8, 11, 11]]
    assert info["mask"].tolist() == [[True] * 4, [True, True, True, False]]


def test_sequence_never_crosses_the_write_cursor():
    unit = Sequence(4, end_key=("next", "done"))
    chunk = torch.zeros(7, dtype=torch.long)
    storage, cursor = make_storage(10, unit, chunk, chunk, chunk)  # one endless episode
    newest = (cursor - 1) % 10
    index, info = unit.expand(torch.tensor([newest, (newest - 2) % 10, cursor]), {}, storage)
    steps = storage.get_leaf("step")[index]
    assert steps[0].tolist() == [20, 20, 20, 20]
    assert info["mask"][0].tolist() == [True, False, False, False]
    assert steps[1].tolist() == [18, 19, 20, 20]
    assert steps[2].tolist() == [11, 12, 13, 14] and info["mask"][2].all()


def test_sequence_spans_the_wrap_point():
    unit = Sequence(5, burn_in=1)
    storage, _ = make_storage(10, unit, torch.zeros(6).long(), torch.ones(7).long())
    index, info = unit.expand(torch.tensor([8]), {}, storage)  # episode 1: slots 6..9, 0..2
    assert index.tolist() == [[7, 8, 9, 0, 1, 2]] and info["mask"].all()


def test_sequence_broadcasts_per_anchor_info():
    unit = Sequence(2, bootstrap=1)
    storage, _ = make_storage(20, unit, torch.zeros(10, dtype=torch.long))
    info = {
        "priority_weight": torch.tensor([0.5, 2.0]),
        "note": "kept",
        "scalar": torch.tensor(1.0),
    }
    _, out = unit.expand(torch.tensor([1, 4]), info, storage)
    assert torch.equal(out["priority_weight"], torch.tensor([[0.5] * 3, [2.0] * 3]))
    assert out["note"] == "kept" and out["scalar"].shape == ()


def test_sequence_errors():
    for kwargs in ({"length": 0}, {"length": 2, "burn_in": -1}, {"length": 2, "dilation": 0}):
        with pytest.raises(ValueError):
            Sequence(**kwargs)
    with pytest.raises(ValueError, match="at most one"):
        Sequence(2, traj_key="a", end_key="b")
    unit = Sequence(2)
    storage, _ = make_storage(5, unit, torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="1-D batch of anchors"):
        unit.expand(torch.zeros(2, 2, dtype=torch.long), {}, storage)
    blind = Sequence(2)
    with pytest.raises(RuntimeError, match="cursor"):
        blind.expand(torch.tensor([0]), {}, storage)


def test_sequence_state_dict_round_trip():
    unit = Sequence(3, burn_in=1)
    chunk = torch.arange(6) // 3
    storage, cursor = make_storage(8, unit, chunk, chunk + 2)
    anchors = torch.arange(8)
    expected = unit.expand(anchors, {}, storage)
    other = Sequence(3, burn_in=1)
    other.load_state_dict(unit.state_dict())
    index, info = other.expand(anchors, {}, storage)
    assert torch.equal(index, expected[0]) and torch.equal(info["mask"], expected[1]["mask"])


@given(
    st.integers(4, 20),
    st.lists(st.lists(st.integers(0, 1), min_size=1, max_size=20), min_size=1, max_size=5),
    st.integers(1, 4),
    st.integers(0, 2),
    st.integers(0, 2),
    st.integers(1, 2),
)
def test_sequence_masks_match_trajectory_membership(capacity, chunks, length, burn, boot, dil):
    unit = Sequence(length, burn_in=burn, bootstrap=boot, dilation=dil, end_key=("next", "done"))
    chunks = [torch.tensor(c[:capacity]) for c in chunks]
    storage, _ = make_storage(capacity, unit, *chunks, done=lambda c: c == 1)
    steps = storage.get_leaf("step")
    done = storage.get_leaf(("next", "done")).view(-1)
    by_step = {int(s): i for i, s in enumerate(steps.tolist()) if i < len(storage)}
    anchors = torch.arange(len(storage))
    index, info = unit.expand(anchors, {}, storage)
    for a in anchors.tolist():
        # walk the anchor's trajectory through consecutive steps (i.e. in time order)
        member = {int(steps[a])}
        s = int(steps[a])
        while s - 1 in by_step and not bool(done[by_step[s - 1]]):
            s -= 1
            member.add(s)
        s = int(steps[a])
        while not bool(done[by_step[s]]) and s + 1 in by_step:
            s += 1
            member.add(s)
        for j in range(unit.window):
            target = int(steps[a]) + (j - burn) * dil
            inside = target in member
            assert bool(info["mask"][a, j]) == inside
            got = int(steps[index[a, j]])
            assert got == (
                target if inside else (min(member) if target < min(member) else max(member))
            )


def test_sequence_through_the_buffer():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100), sample_unit=Sequence(4, burn_in=1), batch_size=6
    )
    rb.extend(TensorDict({"episode": torch.arange(40) // 10, "obs": torch.arange(40)}, [40]))
    batch, info = rb.sample(return_info=True)
    assert batch.shape == (6, 5)
    assert info["mask"].shape == (6, 5)
    obs, episode = batch["obs"], batch["episode"]
    assert ((obs.diff(dim=1) == 1) | ~info["mask"][:, 1:] | ~info["mask"][:, :-1]).all()
    assert (episode == episode[:, 1:2]).all()


def test_sequence_through_a_tensordict_buffer_keeps_masks_in_the_batch():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100), sample_unit=Sequence(3, bootstrap=1), batch_size=4
    )
    rb.extend(TensorDict({"episode": torch.arange(30) // 10}, [30]))
    batch = rb.sample()
    assert batch.shape == (4, 4)
    assert batch["mask"].dtype == torch.bool and batch["bootstrap_mask"][:, -1].all()
