"""What a buffer over a storage of ndim > 1 shows its users: coordinates (torchrl's layout)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    ReplayBuffer,
    Sequence,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
)


def _lanes(lanes: int = 2, steps: int = 10) -> TensorDict:
    """Data of ``lanes`` environments x ``steps`` steps, ``obs`` = lane * 100 + step."""
    obs = torch.arange(lanes).unsqueeze(1) * 100 + torch.arange(steps)
    return TensorDict({"obs": obs}, [lanes, steps])


@pytest.mark.parametrize("make", [LazyTensorStorage, LazyMemmapStorage])
def test_extend_returns_the_coordinates_of_every_written_cell(make, tmp_path):
    storage = (
        make(20, ndim=2) if make is LazyTensorStorage else make(20, ndim=2, scratch_dir=tmp_path)
    )
    rb = ReplayBuffer(storage=storage)
    index = rb.extend(_lanes())  # dim_extend=1: 10 steps along dim 0, 2 lanes
    assert index.dtype == torch.long and tuple(index.shape) == (20, 2)
    assert index[:4].tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert torch.equal(index, torch.cartesian_prod(torch.arange(10), torch.arange(2)))
    # the coordinates address what was written: rb.storage[step, lane]
    assert rb.storage._storage[index[5, 0], index[5, 1]]["obs"].item() == 100 + 2


def test_extend_with_dim_extend_0_and_add():
    rb = ReplayBuffer(storage=LazyTensorStorage(20, ndim=2), dim_extend=0)
    index = rb.extend(_lanes().transpose(0, 1))  # [10, 2] along dim 0 already
    assert torch.equal(index, torch.cartesian_prod(torch.arange(10), torch.arange(2)))
    rb = ReplayBuffer(storage=LazyTensorStorage(12, ndim=2), dim_extend=1)
    rb.extend(torch.arange(3).reshape(3, 1).expand(3, 2))
    assert rb.add(torch.arange(3)).tolist() == [[2, 0], [2, 1], [2, 2]]


def test_extend_into_a_prefilled_tensor_storage_and_an_empty_extend():
    rb = ReplayBuffer(storage=TensorStorage(torch.zeros(4, 3), ndim=2))
    assert rb.extend(torch.ones(3, 2)).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert tuple(rb.extend(torch.ones(3, 0)).shape) == (0, 2)


def test_capacity_along_dim_0_is_rounded_up():
    rb = ReplayBuffer(storage=LazyTensorStorage(10, ndim=2))
    for _ in range(3):
        rb.extend(torch.arange(12).reshape(4, 3))  # [3 steps, 4 lanes]
    assert (len(rb), tuple(rb.storage.shape)) == (12, (3, 4))


def test_sample_info_index_is_a_tuple_and_a_tensordict_batch_holds_it_stacked():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20, ndim=2), batch_size=6)
    rb.extend(_lanes())
    batch, info = rb.sample(return_info=True)
    steps, lanes = info["index"]
    assert tuple(steps.shape) == tuple(lanes.shape) == (6,)
    assert tuple(batch["index"].shape) == (6, 2)
    assert torch.equal(batch["index"], torch.stack(info["index"], -1))
    assert torch.equal(batch["obs"], lanes * 100 + steps)


def test_plain_buffer_info_index_is_a_tuple():
    rb = ReplayBuffer(storage=LazyTensorStorage(20, ndim=2), batch_size=5)
    rb.extend(torch.arange(20).reshape(2, 10))
    sample, info = rb.sample(return_info=True)
    steps, lanes = info["index"]
    assert torch.equal(sample, lanes * 10 + steps)


def _prioritized(**kwargs) -> ReplayBuffer:
    sampler = PrioritizedSampler(20, alpha=1.0, beta=1.0)
    return ReplayBuffer(storage=LazyTensorStorage(20, ndim=2), sampler=sampler, **kwargs)


@pytest.mark.parametrize("dim_extend", [0, 1])
def test_update_priority_with_data_shaped_priorities_round_trips(dim_extend):
    rb = _prioritized(batch_size=4000, dim_extend=dim_extend)
    data = _lanes()  # [lanes, steps]
    if dim_extend == 0:
        data = data.transpose(0, 1)
    priority = torch.zeros(data.shape)
    obs = data["obs"]
    priority[obs == 103] = 3.0
    priority[obs == 7] = 1.0
    index = rb.extend(data)
    rb.update_priority(index, priority)  # laid out like the data, dim_extend moved first
    sample = rb.sample()["obs"]
    assert set(sample.unique().tolist()) == {103, 7}
    share = (sample == 103).float().mean().item()
    assert 0.70 < share < 0.80  # proportional: 3 / (3 + 1)


def test_update_priority_takes_coordinates_tuples_and_flat_cells():
    rb = _prioritized(batch_size=64)
    rb.extend(torch.arange(20).reshape(2, 10))
    rb.update_priority(torch.arange(20), torch.zeros(20))
    rb.update_priority(torch.tensor([[4, 1]]), torch.ones(1))  # step 4, lane 1
    assert rb.sample().unique().tolist() == [14]
    rb.update_priority(torch.tensor([[4, 1]]), torch.zeros(1))
    rb.update_priority((torch.tensor([2]), torch.tensor([0])), torch.ones(1))
    _, info = rb.sample(return_info=True)
    assert [c.unique().tolist() for c in info["index"]] == [[2], [0]]
    rb.update_priority(info["index"], torch.zeros(64))  # what a draw returned goes back
    rb.update_priority(torch.tensor([19]), 1.0)  # a 1-D index holds flat cells
    assert rb.sample().unique().tolist() == [19]


@pytest.mark.parametrize(
    ("index", "match"),
    [
        (torch.zeros(4, 3, dtype=torch.long), r"index has shape \[4, 3\]"),
        (
            torch.tensor([[10, 0]]),
            r"coordinates \[\[10, 0\]\] outside the storage's shape \[10, 2\]",
        ),
        (torch.tensor([[0, 2]]), r"outside the storage's shape"),
    ],
)
def test_bad_coordinates_raise_and_change_nothing(index, match):
    rb = _prioritized(batch_size=8)
    rb.extend(torch.arange(20).reshape(2, 10))
    rb.update_priority(torch.arange(20), torch.zeros(20))
    rb.update_priority(torch.tensor([[3, 0]]), torch.ones(1))
    with pytest.raises(ValueError, match=match):
        rb.update_priority(index, torch.ones(index.shape[0]))
    assert rb.sample().unique().tolist() == [3]


def test_update_tensordict_priority_reads_the_coordinates_of_the_batch():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20, ndim=2),
        sampler=PrioritizedSampler(20, alpha=1.0, beta=1.0),
        batch_size=32,
    )
    rb.extend(_lanes())
    batch = rb.sample()
    rb.update_priority(torch.arange(20), torch.zeros(20))  # only the batch's update counts
    batch["td_error"] = (batch["obs"] == batch["obs"][0]).float()
    rb.update_tensordict_priority(batch)
    assert rb.sample()["obs"].unique().tolist() == [batch["obs"][0].item()]


def test_prioritized_tensordict_extend_reads_per_cell_priorities():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        priority_key="priority",
        storage=LazyTensorStorage(20, ndim=2),
        batch_size=32,
    )
    data = _lanes()
    data["priority"] = (data["obs"] == 105).float()
    rb.extend(data)
    assert rb.sample()["obs"].unique().tolist() == [105]


def test_new_cells_of_a_prioritized_buffer_are_all_sampleable():
    rb = _prioritized(batch_size=2000)
    rb.extend(torch.arange(20).reshape(2, 10))
    assert rb.sample().unique().tolist() == list(range(20))


def test_one_dimensional_storages_are_unchanged():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=3)
    assert rb.extend(TensorDict({"obs": torch.arange(5)}, [5])).tolist() == [0, 1, 2, 3, 4]
    batch, info = rb.sample(return_info=True)
    assert isinstance(info["index"], torch.Tensor) and tuple(info["index"].shape) == (3,)
    assert tuple(batch["index"].shape) == (3,)
    assert ReplayBuffer(storage=LazyTensorStorage(4)).add(torch.tensor(1)) == 0


def test_sequence_batches_carry_anchor_coordinates():
    done = torch.zeros(5, 2, 1, dtype=torch.bool)
    done[-1] = True
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10, ndim=2),
        dim_extend=0,
        batch_size=2,
        sample_unit=Sequence(length=3, done_key="done"),
    )
    rb.extend(TensorDict({"obs": torch.arange(10).reshape(5, 2), "done": done}, [5, 2]))
    batch, info = rb.sample(return_info=True)
    assert tuple(batch["index"].shape) == tuple(batch["anchor_index"].shape) == (6, 2)
    assert len(info["index"]) == 2
    lanes = batch["index"].reshape(2, 3, 2)[..., 1]
    assert (lanes == lanes[:, :1]).all()  # a window stays in its lane


@pytest.mark.parametrize("make", ["LazyTensorStorage", "LazyMemmapStorage"])
def test_a_tuple_with_slices_indexes_rb_all_for_reads_and_in_place_writes(make):
    """torchrl's ``rb[0, 3:4] = x`` on an ndim=2 storage: an index of ``rb[:]``."""
    import rbdata

    rb = rbdata.ReplayBuffer(storage=getattr(rbdata, make)(102, ndim=2))
    data = TensorDict({"a": torch.arange(50).expand(2, 50), ("b", "c"): torch.ones(2, 50)}, [2, 50])
    rb.extend(data)
    revision, count = rb.storage.revision, rb.write_count

    def zeros(*shape):
        return TensorDict(
            {"a": torch.zeros(shape, dtype=torch.long), ("b", "c"): torch.zeros(shape)}, shape
        )

    rb[0, 3:4] = zeros(1)
    rb[1, 5:6] = zeros(1)
    rb[:, 7:8] = zeros(2, 1)
    rb[:, 10:12] = zeros(2)  # broadcast over the lead dim
    expected = torch.arange(50).expand(2, 50).clone()
    expected[0, 3] = expected[1, 5] = 0
    expected[:, [7, 10, 11]] = 0
    assert torch.equal(rb[:]["a"], expected) and torch.equal(rb[0, 3:6]["a"], expected[0, 3:6])
    assert (len(rb), rb.writer.cursor, rb.write_count) == (100, 50, count)
    assert rb.storage.revision == revision + 4


def test_the_whole_buffer_is_written_as_it_reads() -> None:
    """``rb[:] = data``, a full ``write_all``: shaped as ``rb[:]`` (lanes first), as in torchrl."""
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20, ndim=2))
    rb.extend(_lanes())
    whole = rb[:]
    assert whole.batch_size == torch.Size([2, 10])
    whole["obs"] += 1000
    rb[:] = whole
    assert torch.equal(rb[:]["obs"], _lanes()["obs"] + 1000)
    rb.write_all(_lanes())
    assert torch.equal(rb.read_all_in_order()["obs"], _lanes()["obs"])
    assert len(rb) == 20 and rb.write_count == 10  # cells; items (steps) written once
