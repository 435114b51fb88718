"""PrioritizedSliceSampler over storages with ndim > 1: one priority per cell, slices per lane.

A ``[steps, lanes]`` storage (``ndim=2``, one item of ``lanes`` cells per time
step) keeps a priority per cell; a slice starts at a cell drawn by priority
among those that can start one in their lane's trajectory, and runs along
dim 0 inside that lane, never across the write seam.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    PrioritizedSliceSampler,
    TensorDictReplayBuffer,
)

ALPHA, BETA, EPS = 0.7, 0.5, 1e-8


def lanes_data(done: torch.Tensor, start: int = 0) -> TensorDict:
    """``[lanes, steps]`` data (time last, as a collector's), ``step`` counting from ``start``."""
    lanes, steps = done.shape
    step = torch.arange(start, start + steps).expand(lanes, steps)
    lane = torch.arange(lanes).unsqueeze(1).expand(lanes, steps)
    return TensorDict({"done": done.unsqueeze(-1), "step": step, "lane": lane}, [lanes, steps])


def make_buffer(steps: int, lanes: int, slice_len: int, **kwargs) -> TensorDictReplayBuffer:
    sampler = PrioritizedSliceSampler(
        steps * lanes, ALPHA, BETA, EPS, end_key="done", slice_len=slice_len, **kwargs
    )
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(steps * lanes, ndim=2),
        sampler=sampler,
        batch_size=slice_len * 4,
    )


def valid_starts(rb: TensorDictReplayBuffer, slice_len: int) -> torch.Tensor:
    """Reference (Python loops): which flat cells can start a full slice in their lane."""
    storage = rb.storage
    steps, lanes = storage.shape
    items = len(storage) // lanes
    newest = int(storage.get_leaf("step").view(steps, lanes)[:items, 0].argmax())
    order = [(newest + 1 + i) % items for i in range(items)]  # oldest first
    done = storage.get_leaf("done").view(steps, lanes)
    valid = torch.zeros(steps * lanes, dtype=torch.bool)
    for lane in range(lanes):
        run: list[int] = []
        for pos, row in enumerate(order):
            run.append(row * lanes + lane)
            if bool(done[row, lane]) or pos == items - 1:
                for start in run[: max(len(run) - slice_len + 1, 0)]:
                    valid[start] = True
                run = []
    return valid


@settings(max_examples=40, deadline=None)
@given(
    steps=st.integers(3, 10),
    lanes=st.integers(1, 3),
    slice_len=st.integers(1, 3),
    writes=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_tree_holds_each_cells_priority_where_a_slice_can_start(
    steps, lanes, slice_len, writes, seed
):
    gen = torch.Generator().manual_seed(seed)
    rb = make_buffer(steps, lanes, slice_len)
    written = 0
    for n in writes:
        n = min(n, steps)  # one extend writes at most the capacity
        done = torch.rand(lanes, n, generator=gen) < 0.3
        rb.extend(lanes_data(done, written))
        written += n
    valid = valid_starts(rb, slice_len)
    if not valid.any():
        with pytest.raises(RuntimeError):
            rb.sample()
        return
    cells = len(rb.storage)
    coordinates = torch.stack(torch.unravel_index(torch.arange(cells), rb.storage.shape), -1)
    priority = torch.rand(cells, generator=gen) + 0.1
    rb.update_priority(coordinates, priority)
    batch = rb.sample()
    expected = torch.zeros(steps * lanes)
    expected[:cells] = (priority + EPS) ** ALPHA
    leaves = rb.sampler._tree.leaves
    torch.testing.assert_close(leaves, expected * valid, rtol=1e-6, atol=0)
    # every slice: one lane, consecutive steps, starting where the tree has mass
    index = batch["index"].view(-1, slice_len, 2)
    assert (index[..., 1] == index[:, :1, 1]).all()
    step = batch["step"].view(-1, slice_len)
    assert (step[:, 1:] - step[:, :-1] == 1).all()
    assert (batch["lane"].view(-1, slice_len) == index[..., 1]).all()
    start = index[:, 0, 0] * lanes + index[:, 0, 1]
    assert valid[start].all()


def test_starts_are_drawn_proportionally_to_priority_on_a_two_dim_storage():
    torch.manual_seed(0)
    steps, lanes, slice_len = 20, 3, 4
    rb = make_buffer(steps, lanes, slice_len)
    done = torch.zeros(lanes, steps, dtype=torch.bool)
    done[:, 9] = done[:, 19] = True  # two episodes of 10 steps per lane
    index = rb.extend(lanes_data(done))
    priority = torch.rand(steps * lanes) + 0.05
    rb.update_priority(index, priority)
    valid = valid_starts(rb, slice_len)
    assert int(valid.sum()) == 2 * lanes * (10 - slice_len + 1)
    p = (priority + EPS) ** ALPHA * valid
    counts = torch.zeros(steps * lanes)
    for _ in range(50):
        batch, info = rb.sample(slice_len * 400, return_info=True)
        first = batch["index"].view(-1, slice_len, 2)[:, 0]
        counts += torch.bincount(first[:, 0] * lanes + first[:, 1], minlength=steps * lanes)
        weight = info["priority_weight"].view(-1, slice_len)
        drawn = p[first[:, 0] * lanes + first[:, 1]]
        expected = (drawn / p[valid].min()) ** -BETA
        torch.testing.assert_close(weight, expected.unsqueeze(1).expand_as(weight).float())
    assert torch.allclose(counts / counts.sum(), p / p.sum(), atol=0.005)


def test_a_sampled_batchs_priorities_go_to_its_cells():
    steps, lanes, slice_len = 8, 2, 2
    rb = make_buffer(steps, lanes, slice_len)
    index = rb.extend(lanes_data(torch.zeros(lanes, steps, dtype=torch.bool)))
    rb.update_priority(index, torch.zeros(steps * lanes))
    rb.update_priority(torch.tensor([[5, 1]]), torch.tensor([3.0]))  # only (5, 1) has mass
    batch = rb.sample(slice_len * 2)
    assert batch["index"].tolist() == [[5, 1], [6, 1]] * 2
    batch["td_error"] = torch.tensor([0.0, 0.0, 0.0, 7.0])
    rb.update_tensordict_priority(batch)  # duplicates merged with max: (5, 1) 0, (6, 1) 7
    leaves = rb.sampler._tree.leaves
    assert leaves[6 * lanes + 1] == pytest.approx((7.0 + EPS) ** ALPHA)
    assert leaves[5 * lanes + 1] == pytest.approx(0.0, abs=1e-5)
    assert int((leaves > 1e-3).sum()) == 1  # the others hold eps ** alpha


def test_the_boundary_cache_is_filled_by_a_sample_and_emptied_by_a_write():
    rb = make_buffer(6, 2, 2, cache_values=True)
    data = lanes_data(torch.zeros(2, 6, dtype=torch.bool))
    rb.extend(data)
    assert not rb.sampler._cache
    rb.sample()
    starts, lengths = rb.sampler._cache["stop-and-length"]
    assert lengths.tolist() == [6, 6]  # one trajectory per lane
    rb.extend(data[:, :2])
    assert not rb.sampler._cache
    plain = make_buffer(6, 2, 2)
    plain.extend(data)
    plain.sample()
    assert not plain.sampler._cache  # torchrl's: only cache_values fills it


@pytest.mark.parametrize("max_capacity", [5, 20])  # 12 cells: past the 8-slot tree of 5; < 20
def test_a_sampler_of_another_cell_count_is_refused_at_sample(max_capacity):
    sampler = PrioritizedSliceSampler(max_capacity, 1.0, 1.0, end_key="done", slice_len=2)
    storage = LazyTensorStorage(12, ndim=2)
    storage.set(slice(0, 4), lanes_data(torch.zeros(3, 4, dtype=torch.bool)).transpose(0, 1))
    sampler.extend(torch.arange(5))
    with pytest.raises(
        ValueError, match=rf"12 cells \(shape \[4, 3\]\).*max_capacity={max_capacity}"
    ):
        sampler.sample(storage, 4)


def test_a_storage_within_torchrls_tree_size_is_sampled():
    """torchrl's PrioritizedSliceSampler(10) has a 16-slot tree: 12 cells are taken."""
    sampler = PrioritizedSliceSampler(10, 1.0, 1.0, end_key="done", slice_len=2)
    storage = LazyTensorStorage(12, ndim=2)
    storage.set(slice(0, 4), lanes_data(torch.zeros(3, 4, dtype=torch.bool)).transpose(0, 1))
    sampler.extend(torch.arange(12))
    index, info = sampler.sample(storage, 4)
    assert info["priority_weight"].shape == (4,)


def test_the_state_restores_priorities_and_the_write_position():
    torch.manual_seed(0)
    rb = make_buffer(5, 2, 2)
    rb.extend(lanes_data(torch.zeros(2, 4, dtype=torch.bool)))
    rb.extend(lanes_data(torch.zeros(2, 3, dtype=torch.bool), 4))  # wraps: rows 4, 0, 1
    rb.update_priority(torch.tensor([[2, 0], [3, 1]]), torch.tensor([4.0, 9.0]))
    other = PrioritizedSliceSampler(10, ALPHA, BETA, EPS, end_key="done", slice_len=2)
    other.load_state_dict(rb.sampler.state_dict())
    torch.manual_seed(1)
    index, info = rb.sampler.sample(rb.storage, 40)
    torch.manual_seed(1)
    again, again_info = other.sample(rb.storage, 40)
    assert torch.equal(index, again)
    assert torch.equal(info["priority_weight"], again_info["priority_weight"])
    # slices never run across the seam: the newest row (1) is not followed by the oldest (2)
    rows = torch.div(index.view(-1, 2), 2, rounding_mode="floor")
    assert not ((rows[:, 0] == 1) & (rows[:, 1] == 2)).any()
    assert torch.equal(other._tree.leaves, rb.sampler._tree.leaves)
