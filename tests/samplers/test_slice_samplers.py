"""Tests of the slice samplers and of the incremental trajectory index behind them."""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSliceSampler,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from rbdata.trajectories.index import TrajectoryIndex


class Ring:
    """A storage written round-robin, telling the samplers what was written."""

    def __init__(self, capacity: int, *samplers) -> None:
        self.storage = LazyTensorStorage(capacity)
        self.samplers = samplers
        self.cursor = 0
        self.steps = 0

    def write(self, episode: torch.Tensor, done: torch.Tensor | None = None) -> torch.Tensor:
        n = episode.numel()
        if done is None:
            done = torch.cat([episode[1:] != episode[:-1], torch.tensor([False])])
        data = TensorDict(
            {
                "episode": episode,
                "step": torch.arange(self.steps, self.steps + n),
                "next": {"done": done.view(n, 1)},
            },
            [n],
        )
        index = (torch.arange(n) + self.cursor) % self.storage.max_size
        self.storage.set(index, data)
        for sampler in self.samplers:
            sampler.extend(index)
        self.cursor = (self.cursor + n) % self.storage.max_size
        self.steps += n
        return index


def episodes(*lengths: int, first: int = 0) -> torch.Tensor:
    return torch.cat([torch.full((n,), first + i) for i, n in enumerate(lengths)])


def reference(storage, cursor: int, kind: str) -> list[list[int]]:
    """Trajectories (lists of slots, oldest first) computed with a Python loop."""
    n, capacity = len(storage), storage.max_size
    order = [(cursor + i) % capacity for i in range(n)] if n == capacity else list(range(n))
    ids = storage.get_leaf("episode").tolist()
    done = storage.get_leaf(("next", "done")).view(-1).tolist()
    out = [[order[0]]]
    for prev, cur in zip(order, order[1:], strict=False):
        split = ids[prev] != ids[cur] if kind == "ids" else done[prev]
        if split:
            out.append([cur])
        else:
            out[-1].append(cur)
    return out


def as_slots(index: TrajectoryIndex) -> list[list[int]]:
    starts, lengths = index.trajectories()
    return [
        [(s + i) % index.modulus for i in range(n)]
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
    ]


def slice_lengths(info: dict) -> torch.Tensor:
    """Slice lengths, from the end-of-slice markers of the info."""
    ends = info[("next", "truncated")].view(-1).nonzero().view(-1) + 1
    return ends.diff(prepend=torch.zeros(1, dtype=torch.long))


def check_slices(ring: Ring, index: torch.Tensor, slice_len: int | None = None) -> None:
    """Every slice lies in one trajectory and is contiguous in time."""
    steps = ring.storage.get_leaf("step")[index].view(-1, slice_len)
    ids = ring.storage.get_leaf("episode")[index].view(-1, slice_len)
    assert (ids == ids[:, :1]).all()
    assert (steps.diff(dim=1) == 1).all()


# ------------------------------------------------------------------ basics
@pytest.mark.parametrize("markers", ["traj_key", "end_key", "auto"])
def test_slices_stay_inside_one_trajectory(markers):
    kwargs = {"traj_key": {"traj_key": "episode"}, "end_key": {"end_key": ("next", "done")}}
    sampler = SliceSampler(slice_len=4, **kwargs.get(markers, {}))
    ring = Ring(200, sampler)
    ring.write(episodes(7, 12, 4, 30, 9))
    torch.manual_seed(0)
    for _ in range(20):
        index, info = sampler.sample(ring.storage, 32)
        assert index.shape == (32,)
        check_slices(ring, index, 4)
        truncated = info[("next", "truncated")].view(8, 4)
        assert truncated[:, -1].all() and not truncated[:, :-1].any()
        assert torch.equal(info[("next", "done")], info[("next", "truncated")])
        assert not info[("next", "terminated")].any()


def test_uniform_over_trajectories_then_over_their_starts():
    sampler = SliceSampler(slice_len=5, truncated_key=None)
    ring = Ring(100, sampler)
    ring.write(episodes(5, 25, 3, 10))  # 1 + 21 + 0 + 6 valid starts
    torch.manual_seed(0)
    index, _ = sampler.sample(ring.storage, 5 * 30000)
    starts = ring.storage.get_leaf("step")[index.view(-1, 5)[:, 0]]
    counts = torch.bincount(starts, minlength=43).float()
    expected = torch.zeros(43)
    for first, room in ((0, 1), (5, 21), (33, 6)):  # each trajectory: 1/3, split over its starts
        expected[first : first + room] = 10000 / room
    assert counts[expected == 0].sum() == 0
    assert ((counts - expected).abs() / expected)[expected > 0].max() < 0.15


def test_never_crosses_the_write_cursor():
    sampler = SliceSampler(slice_len=5, end_key=("next", "done"))
    ring = Ring(20, sampler)
    for _ in range(3):  # one never-ending episode: only the cursor splits it
        ring.write(torch.zeros(13, dtype=torch.long), torch.zeros(13, dtype=torch.bool))
    torch.manual_seed(0)
    seen = set()
    for _ in range(50):
        index, _ = sampler.sample(ring.storage, 25)
        check_slices(ring, index, 5)
        seen.update(index.view(5, 5)[:, 0].tolist())
    oldest = ring.cursor
    newest_starts = {(oldest - 5 + i) % 20 for i in range(1, 5)}
    assert not seen & newest_starts  # a slice from there would run into the oldest items
    assert {(oldest + i) % 20 for i in range(16)} == seen


def test_trajectory_across_the_wrap_point_is_followed():
    sampler = SliceSampler(slice_len=6, traj_key="episode")
    ring = Ring(10, sampler)
    ring.write(episodes(7))
    ring.write(episodes(8, first=1))  # slots 7, 8, 9, 0, 1, 2, 3, 4
    torch.manual_seed(0)
    index, _ = sampler.sample(ring.storage, 60)
    check_slices(ring, index, 6)
    assert set(index.view(10, 6)[:, 0].tolist()) <= {7, 8, 9}


def test_strict_length():
    ring = Ring(100)
    strict = SliceSampler(slice_len=6)
    loose = SliceSampler(slice_len=6, strict_length=False)
    ring.samplers = (strict, loose)
    ring.write(episodes(3, 10, 2))
    torch.manual_seed(0)
    index, _ = strict.sample(ring.storage, 60)
    assert (ring.storage.get_leaf("episode")[index] == 1).all()
    index, info = loose.sample(ring.storage, 600)
    lengths = slice_lengths(info)
    assert "slice_id" not in info
    assert lengths.numel() == 100 and index.numel() == lengths.sum() < 600
    ids = ring.storage.get_leaf("episode")[index]
    for i, part in enumerate(index.split(lengths.tolist())):
        episode = int(ring.storage.get_leaf("episode")[part[0]])
        assert int(lengths[i]) == {0: 3, 1: 6, 2: 2}[episode]
        assert (ring.storage.get_leaf("episode")[part] == episode).all()
    assert set(ids.tolist()) == {0, 1, 2}
    truncated = info[("next", "truncated")].view(-1)
    assert torch.equal(truncated.nonzero().view(-1), lengths.cumsum(0) - 1)


def test_no_trajectory_long_enough():
    sampler = SliceSampler(slice_len=8)
    ring = Ring(50, sampler)
    ring.write(episodes(3, 7, 5))
    with pytest.raises(RuntimeError, match="longest of the 3 stored trajectories has 7"):
        sampler.sample(ring.storage, 16)


@pytest.mark.parametrize("span", [True, (True, False), (False, True), 2])
def test_span(span):
    sampler = SliceSampler(slice_len=4, span=span)
    ring = Ring(100, sampler)
    ring.write(episodes(6, 9, 2))
    torch.manual_seed(0)
    index, info = sampler.sample(ring.storage, 4 * 500)
    lengths = slice_lengths(info).tolist()
    left, right = span if isinstance(span, tuple) else (span, span)
    steps = ring.storage.get_leaf("step")
    ids = ring.storage.get_leaf("episode")
    first = {0: 0, 1: 6, 2: 15}
    last = {0: 5, 1: 14, 2: 16}
    short_left = short_right = 0
    for part, n in zip(index.split(lengths), lengths, strict=True):
        assert (ids[part] == ids[part[0]]).all() and (steps[part].diff() == 1).all()
        assert (2 if span == 2 and not isinstance(span, bool) else 1) <= n <= 4
        if n < 4:
            episode = int(ids[part[0]])
            at_start = int(steps[part[0]]) == first[episode]
            at_end = int(steps[part[-1]]) == last[episode]
            assert at_start or at_end
            short_left += at_start and not at_end
            short_right += at_end and not at_start
    assert (short_left > 0) == bool(left)
    assert (short_right > 0) == bool(right)


def test_num_slices_and_divisibility():
    sampler = SliceSampler(num_slices=4)
    ring = Ring(100, sampler)
    ring.write(episodes(30, 30))
    torch.manual_seed(0)
    for batch_size in (8, 40, 12):
        index, _ = sampler.sample(ring.storage, batch_size)
        check_slices(ring, index, batch_size // 4)
    with pytest.raises(ValueError, match="got batch_size=10 and num_slices=4"):
        sampler.sample(ring.storage, 10)
    with pytest.raises(RuntimeError, match="batch-size must be divisible"):  # torchrl's type
        sampler.sample(ring.storage, 10)
    with pytest.raises(ValueError, match="slice_len=3"):
        SliceSampler(slice_len=3).sample(ring.storage, 10)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({}, ValueError),
        ({}, TypeError),  # torchrl's type, too
        ({"num_slices": 2, "slice_len": 3}, ValueError),
        ({"slice_len": 2, "end_key": "done", "end_keys": ["done"]}, RuntimeError),
        ({"slice_len": 2, "end_key": "done", "end_keys": ["done"]}, ValueError),
        ({"slice_len": 2, "pad_output": True}, ValueError),
        ({"slice_len": 2, "fragmented": True, "step_key": None}, ValueError),
        ({"slice_len": 2, "fragmented": True, "span": True}, NotImplementedError),
        ({"slice_len": 0}, ValueError),
        ({"slice_len": 2, "span": (True,)}, ValueError),
        ({"slice_len": 2, "span": -1}, ValueError),
        ({"slice_len": 2, "ends": torch.zeros(3)}, ValueError),
        ({"slice_len": 2, "traj_key": 3}, TypeError),
    ],
)
def test_bad_arguments(kwargs, error):
    with pytest.raises(error):
        SliceSampler(**kwargs)


def test_errors_at_sample_time():
    sampler = SliceSampler(slice_len=2, traj_key="missing", end_key="missing_too")
    ring = Ring(10, sampler)
    with pytest.raises(RuntimeError, match="empty"):
        sampler.sample(ring.storage, 4)
    ring.write(episodes(5))
    with pytest.raises(KeyError, match="traj_key=.*missing.* is not stored"):
        sampler.sample(ring.storage, 4)
    with pytest.raises(ValueError, match="consume_after_n"):
        sampler.set_consume_after_n(2)


def test_static_ends_and_trajectories():
    ids = torch.tensor([2, 2, 0, 0, 0, 0, 1, 1, 1, 2])  # trajectory 2 wraps from slot 9 to 0
    ring = Ring(10)
    ring.write(ids)
    ends = torch.tensor([0, 1, 0, 0, 0, 1, 0, 0, 1, 0], dtype=torch.bool)
    torch.manual_seed(0)
    samplers = SliceSampler(slice_len=3, ends=ends), SliceSampler(slice_len=3, trajectories=ids)
    for sampler in samplers:
        index, _ = sampler.sample(ring.storage, 300)
        slices = index.view(-1, 3)
        assert (ids[slices] == ids[slices[:, :1]]).all()
        assert ((slices.diff(dim=1) % 10) == 1).all()
        assert {9} <= set(slices[:, 0].tolist()) <= {9, 2, 3, 6}


# ------------------------------------------------------------------ incremental index
@st.composite
def write_plans(draw):
    capacity = draw(st.integers(3, 25))
    writes = draw(
        st.lists(
            st.tuples(
                st.integers(1, capacity),
                st.lists(st.integers(0, 2), min_size=capacity, max_size=capacity),
                st.booleans(),
            ),
            min_size=1,
            max_size=8,
        )
    )
    return capacity, writes


@given(write_plans(), st.sampled_from(["ids", "ends"]))
def test_incremental_boundaries_match_a_recomputation(plan, kind):
    capacity, writes = plan
    index = TrajectoryIndex(
        traj_key="episode" if kind == "ids" else None,
        end_key=("next", "done") if kind == "ends" else None,
    )
    ring = Ring(capacity, index)
    for n, values, sync in writes:
        values = torch.tensor(values[:n])
        ring.write(values, values == 0)
        if sync:
            index.sync(ring.storage)
            assert as_slots(index) == reference(ring.storage, ring.cursor, kind)
    index.sync(ring.storage)
    expected = reference(ring.storage, ring.cursor, kind)
    assert as_slots(index) == expected
    fresh = TrajectoryIndex(
        traj_key="episode" if kind == "ids" else None,
        end_key=("next", "done") if kind == "ends" else None,
    )
    fresh.load_state_dict(index.state_dict())
    fresh.sync(ring.storage)
    assert as_slots(fresh) == expected


def drawable(index: TrajectoryIndex) -> list[tuple[int, int]]:
    """Every trajectory the weights let a sampler draw, as (first slot, start offsets)."""
    k = torch.searchsorted(
        index.view("excl"), torch.arange(index.base, index.total_end), right=True
    )
    k -= 1
    rooms = index.weight.rooms(index.view("lengths")[k])
    first = index.view("starts")[k] % index.modulus
    return sorted(zip(first.tolist(), rooms.tolist(), strict=True))


SPANS = [False, True, 1, (False, True), (True, False), (1, 0)]


@given(write_plans(), st.integers(1, 4), st.booleans(), st.sampled_from(SPANS))
def test_weights_give_exactly_the_valid_starts(plan, slice_len, strict, span):
    capacity, writes = plan
    sampler = SliceSampler(slice_len=slice_len, strict_length=strict, span=span)
    ring = Ring(capacity, sampler)
    sampler._shape(slice_len)
    for n, values, sync in writes:
        ring.write(torch.tensor(values[:n]))
        if sync:
            sampler._index.sync(ring.storage)
    sampler._index.sync(ring.storage)
    trajectories = reference(ring.storage, ring.cursor, "ids")
    left, right = span if isinstance(span, tuple) else (span, span)
    left, right = (
        min(int(side), slice_len - 1) if side is not True else slice_len - 1
        for side in (left, right)
    )
    expected = []
    for traj in trajectories:
        if strict and len(traj) < slice_len:
            continue
        expected.append((traj[0], max(len(traj) - slice_len + 1 + left + right, 1)))
    assert sampler._index.total_weight == len(expected)  # each drawable trajectory once
    assert drawable(sampler._index) == sorted(expected)
    if expected:
        index, info = sampler.sample(ring.storage, slice_len * 7)
        for part in index.split(slice_lengths(info).tolist()):
            runs = [t[i : i + len(part)] for t in trajectories for i in range(len(t))]
            assert part.tolist() in runs
            owner = next(t for t in trajectories if part[0] in t)
            assert len(part) >= min(len(owner), slice_len - max(left, right))


@given(write_plans(), st.integers(1, 4), st.booleans())
def test_without_replacement_slices_follow_writes(plan, slice_len, strict):
    capacity, writes = plan
    sampler = SliceSamplerWithoutReplacement(slice_len=slice_len, strict_length=strict)
    ring = Ring(capacity, sampler)
    for n, values, sync in writes + [(1, [0], True)]:
        ring.write(torch.tensor(values[:n]))
        if not sync:
            continue
        trajectories = reference(ring.storage, ring.cursor, "ids")
        try:
            index, info = sampler.sample(ring.storage, slice_len * 2)
        except RuntimeError:
            assert all(len(t) < slice_len for t in trajectories) and strict
            continue
        lengths = slice_lengths(info).tolist()
        assert 0 < len(lengths) <= 2
        owners = []
        for part in index.split(list(lengths)):
            owner = next(t for t in trajectories if part[0] in t)
            assert len(part) == min(slice_len, len(owner))
            i = owner.index(int(part[0]))
            assert part.tolist() == owner[i : i + len(part)]
            owners.append(owner[0])
        assert len(set(owners)) == len(owners)


def test_writes_elsewhere_than_the_cursor_trigger_a_rebuild():
    sampler = SliceSampler(slice_len=2, traj_key="episode")
    ring = Ring(12, sampler)
    ring.write(episodes(4, 4, 4))
    sampler.sample(ring.storage, 4)
    data = ring.storage.get(torch.tensor([5, 6]))
    data["episode"] = torch.tensor([9, 9])
    ring.storage.set(torch.tensor([5, 6]), data)
    sampler.extend(torch.tensor([5, 6]))
    sampler.sample(ring.storage, 4)
    assert as_slots(sampler._index) == reference(ring.storage, 7, "ids")


def test_more_writes_than_capacity_between_samples():
    sampler = SliceSampler(slice_len=3)
    ring = Ring(10, sampler)
    for i in range(7):
        ring.write(episodes(4, first=i))
    sampler.sample(ring.storage, 6)
    assert as_slots(sampler._index) == reference(ring.storage, ring.cursor, "ids")


def test_state_dict_round_trip_gives_the_same_batches():
    sampler = SliceSampler(slice_len=3)
    ring = Ring(30, sampler)
    for i in range(4):
        ring.write(episodes(5, 6, first=2 * i))
    sampler.sample(ring.storage, 9)
    state = sampler.state_dict()
    other = SliceSampler(slice_len=3)
    other.load_state_dict(state)
    torch.manual_seed(3)
    expected = sampler.sample(ring.storage, 30)[0]
    torch.manual_seed(3)
    assert torch.equal(other.sample(ring.storage, 30)[0], expected)


# ------------------------------------------------------------------ without replacement
def test_without_replacement_one_slice_per_trajectory_per_pass():
    sampler = SliceSamplerWithoutReplacement(num_slices=3)
    ring = Ring(200, sampler)
    ring.write(episodes(*[10] * 9, 2))  # the length-2 episode cannot give a slice of 4
    torch.manual_seed(0)
    for _ in range(2):
        seen = []
        for i in range(3):
            index, _ = sampler.sample(ring.storage, 12)
            check_slices(ring, index, 4)
            seen += ring.storage.get_leaf("episode")[index.view(3, 4)[:, 0]].tolist()
            assert sampler.ran_out == (i == 2)
        assert sorted(seen) == list(range(9))


def test_without_replacement_last_batch_and_drop_last():
    ring = Ring(200)
    keep = SliceSamplerWithoutReplacement(num_slices=4, shuffle=False)
    drop = SliceSamplerWithoutReplacement(num_slices=4, drop_last=True)
    ring.samplers = (keep, drop)
    ring.write(episodes(*[5] * 6))
    sizes = [keep.sample(ring.storage, 8)[0].numel() for _ in range(2)]
    assert sizes == [8, 4] and keep.ran_out
    index, _ = keep.sample(ring.storage, 8)
    assert ring.storage.get_leaf("episode")[index.view(4, 2)[:, 0]].tolist() == [0, 1, 2, 3]
    assert drop.sample(ring.storage, 8)[0].numel() == 8 and drop.ran_out
    assert drop.sample(ring.storage, 8)[0].numel() == 8 and drop.ran_out
    with pytest.raises(ValueError, match="drop_last=True but only 6 trajectories"):
        SliceSamplerWithoutReplacement(num_slices=7, drop_last=True).sample(ring.storage, 14)


def test_without_replacement_resumes_mid_pass():
    sampler = SliceSamplerWithoutReplacement(num_slices=2)
    ring = Ring(100, sampler)
    ring.write(episodes(*[6] * 8))
    torch.manual_seed(1)
    sampler.sample(ring.storage, 6)
    other = SliceSamplerWithoutReplacement(num_slices=2)
    other.load_state_dict(sampler.state_dict())
    torch.manual_seed(2)
    expected = [sampler.sample(ring.storage, 6)[0] for _ in range(3)]
    torch.manual_seed(2)
    assert all(torch.equal(other.sample(ring.storage, 6)[0], e) for e in expected)


def test_without_replacement_skips_overwritten_trajectories():
    sampler = SliceSamplerWithoutReplacement(num_slices=2)
    ring = Ring(40, sampler)
    ring.write(episodes(*[10] * 4))
    torch.manual_seed(0)
    first = sampler.sample(ring.storage, 4)[0]  # 2 of the 4 trajectories
    ring.write(episodes(10, first=4))  # overwrites episode 0
    index, _ = sampler.sample(ring.storage, 4)
    assert sampler.ran_out
    before = set(first.view(2, 2)[:, 0].div(10, rounding_mode="floor").tolist())
    after = ring.storage.get_leaf("episode")[index.view(-1, 2)[:, 0]].tolist()
    assert 0 not in after
    assert sorted(before | set(after) | {0}) == [0, 1, 2, 3]
    assert len(after) == (2 if 0 in before else 1)
    assert 0 not in ring.storage.get_leaf("episode")[index].tolist()


# ------------------------------------------------------------------ prioritized
def test_prioritized_slice_frequencies_follow_priorities():
    sampler = PrioritizedSliceSampler(100, alpha=0.7, beta=0.5, slice_len=4)
    ring = Ring(100, sampler)
    ring.write(episodes(*[10] * 10))
    gen = torch.Generator().manual_seed(0)
    priority = torch.rand(100, generator=gen) + 0.1
    sampler.update_priority(torch.arange(100), priority)
    valid = (torch.arange(100) % 10) <= 6
    expected = torch.where(valid, (priority + 1e-8) ** 0.7, 0)
    expected /= expected.sum()
    torch.manual_seed(0)
    counts = torch.zeros(100)
    for _ in range(40):
        index, info = sampler.sample(ring.storage, 4 * 500)
        check_slices(ring, index, 4)
        counts += torch.bincount(index.view(-1, 4)[:, 0], minlength=100)
        start_weight = info["priority_weight"].view(-1, 4)
        assert (start_weight == start_weight[:, :1]).all()
    assert counts[~valid].sum() == 0
    assert 0.5 * (counts / counts.sum() - expected).abs().sum() < 0.04


def test_prioritized_slice_weights_and_masked_updates():
    sampler = PrioritizedSliceSampler(50, alpha=1.0, beta=1.0, slice_len=3)
    ring = Ring(50, sampler)
    ring.write(episodes(5, 5))
    priority = torch.ones(10)
    priority[2] = 3.0
    priority[4] = 100.0  # slot 4 cannot start a slice of 3: never drawn
    sampler.update_priority(torch.arange(10), priority)
    torch.manual_seed(0)
    index, info = sampler.sample(ring.storage, 3 * 400)
    starts = index.view(-1, 3)[:, 0]
    assert set(starts.tolist()) == {0, 1, 2, 5, 6, 7}
    weight = info["priority_weight"].view(-1, 3)
    assert (weight == weight[:, :1]).all()
    assert torch.allclose(weight[starts == 2, 0], torch.tensor(1 / 3.0))
    assert torch.allclose(weight[starts != 2, 0], torch.tensor(1.0))
    assert 0.3 < (starts == 2).float().mean() < 0.45
    ring.write(torch.full((2,), 2))  # slots 10, 11: a trajectory too short for a slice
    sampler.sample(ring.storage, 3)
    ring.write(torch.full((4,), 2))  # ... now slots 10..15: starts 10..13 become valid
    index, _ = sampler.sample(ring.storage, 3 * 200)
    starts = set(index.view(-1, 3)[:, 0].tolist())
    assert {10, 11} <= starts <= {0, 1, 2, 5, 6, 7, 10, 11, 12, 13}
    with pytest.raises(ValueError, match="finite and >= 0"):
        sampler.update_priority(torch.tensor([1]), torch.tensor([-1.0]))
    with pytest.warns(UserWarning, match="Left spanning is disabled"):
        sampler = PrioritizedSliceSampler(10, 1.0, 1.0, slice_len=2, span=True)
    assert sampler.span == (False, True)


def test_prioritized_slice_state_dict_and_right_span():
    sampler = PrioritizedSliceSampler(40, alpha=1.0, beta=0.0, slice_len=4, span=(False, True))
    ring = Ring(40, sampler)
    ring.write(episodes(6, 6))
    sampler.update_priority(torch.tensor([5]), torch.tensor([50.0]))
    other = PrioritizedSliceSampler(40, alpha=1.0, beta=0.0, slice_len=4, span=(False, True))
    other.load_state_dict(sampler.state_dict())
    torch.manual_seed(0)
    index, info = other.sample(ring.storage, 400)
    lengths = slice_lengths(info)
    assert lengths.max() == 4 and lengths.min() == 1
    starts = index[torch.cumsum(lengths, 0) - lengths]
    assert (starts == 5).float().mean() > 0.5


# ------------------------------------------------------------------ through the buffer
def test_through_the_buffer_with_wrap_around():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(64), sampler=SliceSampler(slice_len=8), batch_size=32
    )
    steps = 0
    torch.manual_seed(0)
    for chunk in range(12):
        n = 13
        episode = (torch.arange(steps, steps + n) // 20).long()
        done = torch.zeros(n, 1, dtype=torch.bool)
        step = torch.arange(steps, steps + n)
        rb.extend(TensorDict({"episode": episode, "step": step, "next": {"done": done}}, [n]))
        steps += n
        if chunk >= 1:
            batch = rb.sample()
            step = batch["step"].view(4, 8)
            assert (step.diff(dim=1) == 1).all()
            assert (batch["episode"].view(4, 8) == batch["episode"].view(4, 8)[:, :1]).all()
            assert batch["next", "truncated"].view(4, 8)[:, -1].all()


def test_writes_at_the_cursor_are_processed_incrementally():
    index = TrajectoryIndex(traj_key="episode")
    ring = Ring(30, index)
    ring.write(episodes(10, 5))
    assert index.sync(ring.storage) == (False, 0)
    for i in range(6):
        ring.write(episodes(4, 3, first=2 + 2 * i))
        assert index.sync(ring.storage)[0] is False
    assert index.sync(ring.storage) is None
    assert as_slots(index) == reference(ring.storage, ring.cursor, "ids")


def test_list_storage():
    storage = LazyStackStorage(20)
    sampler = SliceSampler(slice_len=2)
    storage.set(torch.arange(5), TensorDict({"episode": torch.tensor([0, 0, 1, 1, 1])}, [5]))
    sampler.extend(torch.arange(5))
    torch.manual_seed(0)
    index, _ = sampler.sample(storage, 40)
    assert set(index.view(-1, 2)[:, 0].tolist()) == {0, 2, 3}


@given(write_plans(), st.integers(1, 4), st.booleans(), st.sampled_from([False, (False, True)]))
@example(  # the oldest trajectory, trimmed below slice_len, loses its right-span starts
    (
        13,
        [(1, [0] * 13, False)] * 5
        + [(2, [1] + [0] * 12, False), (5, [0] * 13, True), (3, [0] * 13, False)],
    ),
    4,
    True,
    (False, True),
)
def test_prioritized_valid_starts_kept_incrementally(plan, slice_len, strict, span):
    capacity, writes = plan
    sampler = PrioritizedSliceSampler(
        capacity, 1.0, 1.0, slice_len=slice_len, strict_length=strict, span=span
    )
    ring = Ring(capacity, sampler)
    sampler._shape(slice_len)
    for n, values, sync in writes:
        ring.write(torch.tensor(values[:n]))
        if sync:
            with contextlib.suppress(RuntimeError):  # no slice can be drawn yet
                sampler._sync(ring.storage)
    with contextlib.suppress(RuntimeError):
        sampler._sync(ring.storage)
    right = 0 if span is False else slice_len - 1
    expected = torch.zeros(capacity, dtype=torch.bool)
    for traj in reference(ring.storage, ring.cursor, "ids"):
        # torchrl's prioritized rule: strict_length only drops the starts too close to the end
        room = max(len(traj) - slice_len + 1 + right, 0 if strict else 1)
        expected[traj[:room]] = True
    assert torch.equal(sampler._valid, expected)
    assert torch.equal(sampler._tree.leaves, sampler._raw * expected)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SliceSampler(slice_len=4),
        lambda: SliceSamplerWithoutReplacement(slice_len=4),
        lambda: PrioritizedSliceSampler(50, 1.0, 1.0, slice_len=4),
    ],
)
def test_buffer_dumps_and_loads(tmp_path, make):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(50), sampler=make(), batch_size=8)
    for i in range(7):
        rb.extend(TensorDict({"episode": torch.full((10,), i), "obs": torch.arange(10.0)}, [10]))
    rb.sample()
    rb.dumps(tmp_path)
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(50), sampler=make(), batch_size=8)
    other.loads(tmp_path)
    torch.manual_seed(0)
    expected = rb.sample()["index"]
    torch.manual_seed(0)
    assert torch.equal(other.sample()["index"], expected)


@pytest.mark.parametrize("span", [(True, False), (False, True)])
def test_without_replacement_spans_on_the_side_asked(span):
    sampler = SliceSamplerWithoutReplacement(slice_len=4, span=span, shuffle=False)
    ring = Ring(100, sampler)
    ring.write(episodes(*[6] * 10))
    torch.manual_seed(0)
    cut_at_start = cut_at_end = 0
    for _ in range(20):
        index, info = sampler.sample(ring.storage, 40)  # one pass: one slice per trajectory
        for part in index.split(slice_lengths(info).tolist()):
            steps = ring.storage.get_leaf("step")[part] % 6
            assert (steps.diff() == 1).all() and 1 <= len(part) <= 4
            cut_at_start += len(part) < 4 and int(steps[0]) == 0
            cut_at_end += len(part) < 4 and int(steps[-1]) == 5
        assert sampler.ran_out
    assert (cut_at_start > 0, cut_at_end > 0) == span


def test_torchrls_traj_key_flags_say_where_trajectories_come_from():
    """``_fetch_traj`` / ``_traj_key_auto``: read-only, for torchrl's tests."""
    import torch
    from tensordict import TensorDict

    from rbdata import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

    assert SliceSampler(num_slices=2, end_key="done")._fetch_traj is False
    assert SliceSampler(num_slices=2, traj_key="episode")._traj_key_auto is False
    for data, from_ids in [
        ({"episode": torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])}, True),
        ({("next", "done"): torch.tensor([0, 0, 1, 0, 0, 1, 0, 1]).bool().unsqueeze(-1)}, False),
    ]:
        sampler = SliceSampler(num_slices=2)
        assert sampler._fetch_traj is True and sampler._traj_key_auto is True
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), sampler=sampler, batch_size=6)
        rb.extend(TensorDict(data, [8]))
        rb.sample()
        assert sampler._fetch_traj is from_ids and sampler._traj_key_auto is False


def test_torchrls_get_stop_and_length_reads_the_storage_and_follows_its_revision():
    """``_get_stop_and_length``: torchrl's ``(start, stop, lengths)``, for its tests."""
    import torch
    from tensordict import TensorDict

    from rbdata import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

    storage = LazyTensorStorage(10)
    sampler = SliceSampler(slice_len=2, end_key="done", cache_values=True)
    rb = TensorDictReplayBuffer(storage=storage, sampler=sampler)
    done = torch.zeros(10, dtype=torch.bool)
    done[[4, 9]] = True
    rb.extend(TensorDict({"done": done}, [10]))
    first = sampler._get_stop_and_length(storage)
    assert [t.flatten().tolist() for t in first] == [[0, 5], [4, 9], [5, 5]]
    assert sampler._get_stop_and_length(storage)[0] is first[0]  # nothing moved: the same
    edited = storage.get(4).clone()
    edited["done"] = False
    storage.set(4, edited, set_cursor=False)  # not through the buffer: the revision says it
    assert sampler._get_stop_and_length(storage)[1].flatten().tolist() == [9]


def test_a_sampler_never_fed_reads_a_wrapped_storage_from_its_newest_slot():
    import torch
    from tensordict import TensorDict

    from rbdata import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    for traj, length in enumerate((5, 3, 4)):  # the third wraps: slots 8, 9, 0, 1
        rb.extend(TensorDict({"traj": torch.full((length,), traj)}, [length]))
    fresh = SliceSampler(traj_key="traj", num_slices=1)
    start, stop, lengths = fresh._get_stop_and_length(rb.storage)
    assert lengths.tolist() == [3, 3, 4] and stop.flatten().tolist() == [4, 7, 1]


def test_slice_sampler_without_replacement_sample_list_survives_a_dump(tmp_path):
    """``_sample_list`` (read-only, torchrl's name): the pass's remaining trajectories."""
    import torch
    from tensordict import TensorDict

    from rbdata import LazyTensorStorage, SliceSamplerWithoutReplacement, TensorDictReplayBuffer

    def build():
        sampler = SliceSamplerWithoutReplacement(num_slices=2)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sampler=sampler, batch_size=4)
        done = (torch.arange(20) % 5 == 4).unsqueeze(-1)
        rb.extend(TensorDict({"a": torch.arange(20), ("next", "done"): done}, [20]))
        return sampler, rb

    sampler, rb = build()
    assert sampler._sample_list is None
    rb.sample()
    before = sampler._sample_list.clone()
    assert before.numel() == 2  # 4 trajectories, 2 visited
    rb.dumps(tmp_path)
    sampler2, rb2 = build()
    rb2.loads(tmp_path)
    assert torch.equal(sampler2._sample_list, before)


@pytest.mark.parametrize("sampler", [SliceSampler(num_slices=2), "prioritized"])
def test_a_slice_sampler_over_a_list_storage_is_refused_when_sampling(sampler):
    """torchrl's ``test_slice_sampler_errors``: a ListStorage reads lists, not a TensorDict."""
    if sampler == "prioritized":
        sampler = PrioritizedSliceSampler(max_capacity=20, alpha=0.7, beta=0.9, num_slices=2)
    done = torch.zeros(20, 1, dtype=torch.bool)
    done[9] = done[19] = True
    data = TensorDict({"obs": torch.arange(20.0), ("next", "done"): done}, [20])
    storage = ListStorage(20)
    storage.set(range(20), data)
    with pytest.raises(RuntimeError, match="Could not get a tensordict out of the storage") as err:
        sampler.sample(storage, batch_size=4)
    assert isinstance(err.value, TypeError)


def test_a_slice_sampler_over_a_lazy_stack_storage_samples():
    done = torch.zeros(20, 1, dtype=torch.bool)
    done[9] = done[19] = True
    data = TensorDict({"obs": torch.arange(20.0), ("next", "done"): done}, [20])
    lazy = LazyStackStorage(20)
    lazy.set(range(20), data)
    index, _ = SliceSampler(num_slices=2).sample(lazy, batch_size=4)
    assert index.numel() == 4
