"""Trajectories of multi-dim storages and of fragmented data, and the slice samplers over them."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    PrioritizedSliceSampler,
    ReplayBuffer,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from rbdata.errors import DuplicateStepError
from rbdata.trajectories.layouts import FragmentedTrajectoryIndex, GridTrajectoryIndex


def slots_of(index) -> list[list[int]]:
    """The trajectories of an index as lists of storage slots, in its order."""
    starts, lengths = index.trajectories()
    return [
        index.to_slots(torch.arange(s, s + n)).tolist()
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
    ]


# ------------------------------------------------------------------ ndim > 1
class Grid:
    """A ``[capacity, cells]`` storage filled through a buffer (one item per time step)."""

    def __init__(self, capacity: int, cells: int, *listeners, sampler=None) -> None:
        self.storage = LazyTensorStorage(capacity * cells, ndim=2)
        kwargs = {} if sampler is None else {"sampler": sampler}
        self.rb = ReplayBuffer(storage=self.storage, **kwargs)
        self.capacity, self.cells, self.listeners = capacity, cells, listeners
        self.cursor = self.steps = 0

    def write(self, ids: torch.Tensor) -> None:
        """Write ``ids`` (``[n, cells]``), one item (row) per time step."""
        n = ids.shape[0]
        step = torch.arange(self.steps, self.steps + n).expand(self.cells, n)
        data = TensorDict({"episode": ids.T, "step": step}, [self.cells, n])
        items = self.rb.extend(data)[:: self.cells, 0]  # the rows of the written cells' coordinates
        for listener in self.listeners:
            listener.extend(items)
        self.cursor = (self.cursor + n) % self.capacity
        self.steps += n

    def reference(self) -> list[list[int]]:
        """Trajectories as flat slots, cell after cell, oldest first (a Python loop)."""
        items = len(self.storage) // self.cells
        full = items == self.capacity
        order = [(self.cursor + i) % self.capacity if full else i for i in range(items)]
        ids = self.storage.get_leaf("episode").view(-1).tolist()
        out = []
        for cell in range(self.cells):
            slots = [item * self.cells + cell for item in order]
            out.append([slots[0]])
            for prev, cur in zip(slots, slots[1:], strict=False):
                if ids[prev] != ids[cur]:
                    out.append([cur])
                else:
                    out[-1].append(cur)
        return out


grid_writes = st.tuples(
    st.integers(2, 7),
    st.integers(2, 3),  # one cell: LazyTensorStorage(ndim=2) refuses a [1, n] batch (not ours)
    st.lists(
        st.tuples(st.integers(1, 9), st.integers(0, 2), st.booleans()), min_size=1, max_size=6
    ),
)


@given(grid_writes)
@settings(deadline=None)
def test_grid_trajectories_match_a_recomputation(plan):
    capacity, cells, writes = plan
    index = GridTrajectoryIndex(traj_key="episode")
    grid = Grid(capacity, cells, index)
    gen = torch.Generator().manual_seed(len(writes))
    for n, top, sync in writes:
        grid.write(torch.randint(0, top + 1, (n, cells), generator=gen))
        if sync:
            index.sync(grid.storage)
            assert slots_of(index) == grid.reference()
    index.sync(grid.storage)
    assert slots_of(index) == grid.reference()
    fresh = GridTrajectoryIndex(traj_key="episode")
    fresh.load_state_dict(index.state_dict())
    fresh.sync(grid.storage)
    assert slots_of(fresh) == grid.reference()


@given(grid_writes, st.integers(1, 4), st.booleans())
@settings(deadline=None, max_examples=60)
def test_grid_slices_stay_in_one_cell_and_follow_time(plan, slice_len, strict):
    capacity, cells, writes = plan
    sampler = SliceSampler(slice_len=slice_len, traj_key="episode", strict_length=strict)
    grid = Grid(capacity, cells, sampler=sampler)
    for n, top, _ in writes:
        grid.write(torch.randint(0, top + 1, (n, cells)))
    trajectories = grid.reference()
    if strict and max(map(len, trajectories)) < slice_len:
        with pytest.raises(RuntimeError, match="sufficient length"):
            sampler.sample(grid.storage, slice_len * 3)
        return
    index, info = sampler.sample(grid.storage, slice_len * 3)
    ends = info[("next", "truncated")].view(-1).nonzero().view(-1) + 1
    for part in index.split(ends.diff(prepend=torch.zeros(1, dtype=torch.long)).tolist()):
        owner = next(t for t in trajectories if part[0] in t)
        i = owner.index(int(part[0]))
        assert part.tolist() == owner[i : i + len(part)]
        assert len(part) == min(slice_len, len(owner))


def test_grid_at_capacity_through_the_buffer():
    # torchrl's test: two environments, the buffer wrapped; step 9 is only in a slice across it
    trajectory = torch.stack([torch.arange(12) // 3, torch.arange(12) // 6])
    td = TensorDict({"trajectory": trajectory, "steps": torch.arange(12).expand(2, 12)}, [2, 12])
    for sampler in (
        SliceSampler(traj_key="trajectory", num_slices=2),
        SliceSamplerWithoutReplacement(traj_key="trajectory", num_slices=2),
    ):
        rb = ReplayBuffer(sampler=sampler, storage=LazyTensorStorage(20, ndim=2), batch_size=6)
        rb.extend(td)
        torch.manual_seed(0)
        found = False
        for _, batch in zip(range(200), rb, strict=False):
            steps, ids = batch["steps"].view(-1, 3), batch["trajectory"].view(-1, 3)
            assert (steps.diff(dim=1) == 1).all() and (ids == ids[:, :1]).all()
            found = found or bool((steps == 9).any())
        assert found


def test_grid_without_replacement_visits_each_trajectory_once_per_pass():
    sampler = SliceSamplerWithoutReplacement(slice_len=2, traj_key="episode")
    grid = Grid(10, 3, sampler=sampler)
    grid.write(torch.arange(10).div(5, rounding_mode="floor").unsqueeze(1).expand(10, 3) * 3)
    grid.write(torch.full((4, 3), 7))  # overwrites 4 items: 9 trajectories of >= 2 steps left
    trajectories = [t for t in grid.reference() if len(t) >= 2]
    seen = []
    while True:
        index, _ = sampler.sample(grid.storage, 4)
        seen += [next(i for i, t in enumerate(trajectories) if s in t) for s in index[::2].tolist()]
        if sampler.ran_out:
            break
    assert sorted(seen) == list(range(len(trajectories)))


def test_prioritized_slices_stay_in_one_lane_of_a_multi_dim_storage():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20, ndim=2),
        sampler=PrioritizedSliceSampler(20, 1.0, 1.0, slice_len=2, traj_key="episode"),
        batch_size=40,
    )
    episode = torch.arange(2).unsqueeze(1).expand(2, 10)  # lane 0: episode 0, lane 1: episode 1
    rb.extend(TensorDict({"episode": episode}, [2, 10]))
    batch = rb.sample()
    lanes = batch["index"][:, 1].view(20, 2)
    steps = batch["index"][:, 0].view(20, 2)
    assert (lanes[:, 0] == lanes[:, 1]).all() and (steps[:, 1] == steps[:, 0] + 1).all()
    assert (batch["episode"].view(20, 2)[:, 0] == lanes[:, 0]).all()


@pytest.mark.parametrize("ndim", [1, 2])
def test_in_place_edits_keep_the_write_position(ndim):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10 * ndim, ndim=ndim),
        sampler=SliceSampler(slice_len=3, traj_key="episode"),
        batch_size=300,
    )
    for first in range(0, 15, 5):  # wraps: episodes 1 (items 5..9) and 2 (items 0..4) live
        episode = torch.full((ndim, 5), first // 5).squeeze(0)
        rb.extend(TensorDict({"episode": episode}, episode.shape))
    edit = torch.ones(1, ndim, dtype=torch.long).squeeze(-1)
    rb.storage.set(torch.tensor([7]), TensorDict({"episode": edit}, edit.shape))
    rb.sampler.mark_update(torch.tensor([7]))  # an in-place edit of an old item
    torch.manual_seed(0)
    batch = rb.sample()
    assert (batch["episode"].view(100, 3) == batch["episode"].view(100, 3)[:, :1]).all()
    rows = batch["index"] if ndim == 1 else batch["index"][:, 0]  # ndim=2: [step, lane] coordinates
    starts = rows.reshape(100, 3)[:, 0]
    assert set(starts.tolist()) == {5, 6, 7, 0, 1, 2}


# ------------------------------------------------------------------ fragmented
fragment_plans = st.tuples(
    st.integers(4, 20),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=12),
)


def write_fragments(capacity: int, plan, *samplers) -> tuple[LazyTensorStorage, list]:
    """Interleaved chunks of several trajectories (``(traj, n steps)`` each) into a ring."""
    storage = LazyTensorStorage(capacity)
    next_step: dict[int, int] = {}
    cursor = 0
    for traj, n in plan:
        step = next_step.get(traj, 0) + torch.arange(n)
        next_step[traj] = int(step[-1]) + 1
        n = min(n, capacity)
        slots = (torch.arange(n) + cursor) % capacity
        data = {"traj": torch.full((n,), traj), "step_count": step[-n:]}
        storage.set(slots, TensorDict(data, [n]))
        for sampler in samplers:
            sampler.extend(slots)
        cursor = (cursor + n) % capacity
    return storage, sorted(next_step)


def fragment_reference(storage: LazyTensorStorage) -> list[list[int]]:
    n = len(storage)
    traj, step = storage.get_leaf("traj")[:n].tolist(), storage.get_leaf("step_count")[:n].tolist()
    order = sorted(range(n), key=lambda s: (traj[s], step[s]))
    out: list[list[int]] = []
    for prev, cur in zip([None, *order], order, strict=False):
        if prev is None or traj[prev] != traj[cur] or step[cur] != step[prev] + 1:
            out.append([cur])
        else:
            out[-1].append(cur)
    return out


@given(fragment_plans)
@settings(deadline=None)
def test_fragmented_runs_match_a_recomputation(plan):
    capacity, writes = plan
    index = FragmentedTrajectoryIndex(traj_key="traj", step_key="step_count")
    storage, _ = write_fragments(capacity, writes, index)
    index.sync(storage)
    assert slots_of(index) == fragment_reference(storage)
    assert index.sync(storage) is None


@given(fragment_plans, st.integers(1, 4), st.booleans())
@settings(deadline=None, max_examples=60)
def test_fragmented_slices_follow_the_steps(plan, slice_len, strict):
    capacity, writes = plan
    sampler = SliceSampler(
        slice_len=slice_len, traj_key="traj", fragmented=True, strict_length=strict
    )
    storage, _ = write_fragments(capacity, writes, sampler)
    runs = fragment_reference(storage)
    if strict and max(map(len, runs)) < slice_len:
        with pytest.raises(RuntimeError, match="sufficient length"):
            sampler.sample(storage, slice_len)
        return
    index, info = sampler.sample(storage, slice_len * 4)
    ends = info[("next", "truncated")].view(-1).nonzero().view(-1) + 1
    for part in index.split(ends.diff(prepend=torch.zeros(1, dtype=torch.long)).tolist()):
        owner = next(r for r in runs if part[0] in r)
        i = owner.index(int(part[0]))
        assert part.tolist() == owner[i : i + len(part)]
        assert len(part) == min(slice_len, len(owner))


def test_fragmented_through_the_buffer_with_auto_detected_ids():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(40),
        sampler=SliceSampler(slice_len=4, fragmented=True),
        batch_size=8,
    )
    for start in range(0, 12, 3):  # two collectors, interleaved chunks of 3 steps
        for traj in (0, 1):
            steps = torch.arange(start, start + 3)
            rb.extend(TensorDict({"episode": torch.full((3,), traj), "step_count": steps}, [3]))
    torch.manual_seed(0)
    batch = rb.sample()
    assert rb.sampler.traj_key == "episode"
    steps, ids = batch["step_count"].view(2, 4), batch["episode"].view(2, 4)
    assert (steps.diff(dim=1) == 1).all() and (ids == ids[:, :1]).all()


def test_fragmented_bad_data():
    def sample(data: dict, **kwargs):
        storage = LazyTensorStorage(4)
        storage.set(slice(0, 4), TensorDict(data, [4]))
        sampler = SliceSampler(slice_len=1, fragmented=True, **kwargs)
        sampler.extend(torch.arange(4))
        return sampler.sample(storage, 2)

    ids, steps = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 0])
    with pytest.raises(DuplicateStepError, match="duplicate records for trajectory 1 at step 0"):
        sample({"episode": ids, "step_count": steps})
    with pytest.raises(RuntimeError):  # torchrl's type
        sample({"episode": ids, "step_count": steps})
    with pytest.raises(ValueError, match="non-negative"):
        sample({"episode": ids, "step_count": torch.tensor([0, -1, 0, 1])})
    with pytest.raises(TypeError, match="integer"):
        sample({"episode": ids.float(), "step_count": torch.arange(4)})
    with pytest.raises(RuntimeError, match="requires a trajectory identifier"):
        sample({"other": ids, "step_count": torch.arange(4)})
    with pytest.raises(NotImplementedError, match="with replacement only"):
        SliceSamplerWithoutReplacement(slice_len=2, fragmented=True)
    with pytest.raises(NotImplementedError, match="with replacement only"):
        PrioritizedSliceSampler(10, 1.0, 1.0, slice_len=2, fragmented=True)
