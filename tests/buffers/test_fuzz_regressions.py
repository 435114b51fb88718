"""Divergences from torchrl 0.14.1 found by the differential fuzzer (tests/compat/test_fuzz.py).

Each test pins what torchrl does in the case the fuzzer found, so that the fix
stays without torchrl installed.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict, tensorclass

from rbdata import (
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    TensorStorage,
)


@tensorclass
class _Step:
    obs: torch.Tensor
    reward: torch.Tensor


def _step(value: float) -> _Step:
    return _Step(obs=torch.full((2,), value), reward=torch.tensor(value), batch_size=[])


def test_add_of_a_tensorclass_item_to_a_lazy_tensor_storage(tmp_path):
    """torchrl: ``add`` of one tensorclass item writes it (rbdata raised ValueError)."""
    for storage in (LazyTensorStorage(4), LazyMemmapStorage(4, scratch_dir=tmp_path)):
        rb = ReplayBuffer(storage=storage)
        assert rb.add(_step(1.0)) == 0
        assert rb.add(_step(2.0)) == 1
        assert rb[:].reward.tolist() == [1.0, 2.0]
        assert rb[1].obs.tolist() == [2.0, 2.0]


def test_extend_with_a_list_of_tensorclasses_stacks_them():
    """torchrl: a list of tensorclass items is a stack, as a list of TensorDicts is."""
    rb = ReplayBuffer(
        storage=TensorStorage(_Step(obs=torch.zeros(4, 2), reward=torch.zeros(4), batch_size=[4]))
    )
    assert rb.extend([_step(1.0), _step(2.0)]).tolist() == [0, 1]
    assert rb[:2].reward.tolist() == [1.0, 2.0]
    lazy = ReplayBuffer(storage=LazyTensorStorage(4))
    lazy.extend([_step(3.0)])
    assert lazy[:].reward.tolist() == [3.0]


def test_sample_transforms_do_not_change_the_index_entry():
    """torchrl: a TensorDict sample's ``"index"`` is set after the transforms run."""
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(4),
        transform=lambda td: td.apply(lambda t: t * 10),
        batch_size=3,
    )
    rb.extend(TensorDict({"a": torch.arange(4)}, batch_size=[4]))
    batch, info = rb.sample(return_info=True)
    assert batch["index"].tolist() == info["index"].tolist()
    assert (batch["a"] == batch["index"] * 10).all()


def test_stats_capacity_of_an_ndim2_storage_counts_its_rounded_up_cells():
    """torchrl: ``capacity`` is the allocated cells (whole items along dim 0), never below size."""
    rb = ReplayBuffer(storage=LazyTensorStorage(3, ndim=2))
    assert rb.stats()["capacity"] == 3  # before the first write: the max_size given
    rb.extend(torch.zeros(2, 2, 1))  # items of 2 cells: 2 items, 4 cells
    stats = rb.stats()
    assert (stats["size"], stats["capacity"], stats["utilization"]) == (4, 4, 1.0)


def test_cursor_wraps_after_the_first_item_of_a_lazy_ndim2_storage(tmp_path):
    """torchrl: one ``[4, 1]`` item fills ``max_size=4`` (ndim=2): the cursor is back at 0."""
    for storage in (
        LazyTensorStorage(4, ndim=2),
        LazyMemmapStorage(4, scratch_dir=tmp_path, ndim=2),
    ):
        rb = ReplayBuffer(storage=storage)
        rb.extend(torch.zeros(4, 1, 3))
        assert (rb.write_count, rb.writer.cursor, len(rb)) == (1, 0, 4)
        rb.extend(torch.ones(4, 1, 3))  # overwrites the one item
        assert (rb.write_count, rb.writer.cursor) == (2, 0)
        assert rb[:].sum().item() == 12


def test_reading_an_uninitialized_tensor_storage_is_a_runtime_error(tmp_path):
    """torchrl: ``rb[i]``, ``rb[[i, j]]`` and ``rb[a:b]`` before the first write: RuntimeError."""
    for storage in (LazyTensorStorage(4), LazyMemmapStorage(4, scratch_dir=tmp_path)):
        rb = ReplayBuffer(storage=storage)
        for index in (0, 5, [1, 0], torch.tensor([2]), slice(0, 1)):
            with pytest.raises(RuntimeError, match="not initialized"):
                rb[index]
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(torch.zeros(2))
    with pytest.raises(IndexError):  # out of range of a written storage: still IndexError
        rb[5]


@pytest.mark.parametrize("kind", ["lazy", "memmap"])
def test_ndim2_storage_of_one_cell_per_item(kind, tmp_path):
    """torchrl: items of one cell (``[1, T]`` batches, ndim=2) write, read and reload."""

    def storage():
        if kind == "lazy":
            return LazyTensorStorage(3, ndim=2)
        return LazyMemmapStorage(
            3, ndim=2, scratch_dir=tmp_path / str(len(list(tmp_path.iterdir())))
        )

    rb = ReplayBuffer(storage=storage())
    index = rb.extend(torch.arange(6).reshape(1, 6, 1))  # 6 items of 1 cell: the last 3 stay
    assert index.tolist() == [[0, 0], [1, 0], [2, 0], [0, 0], [1, 0], [2, 0]]
    assert (len(rb), rb.write_count, rb.writer.cursor) == (3, 6, 0)
    assert rb[:].squeeze(-1).tolist() == [[3, 4, 5]]
    assert rb.add(torch.tensor([[7]])).tolist() == [[0, 0]]
    assert rb[:].squeeze(-1).tolist() == [[7, 4, 5]]
    again = ReplayBuffer(storage=storage())
    again.load_state_dict(rb.state_dict())
    assert again[:].squeeze(-1).tolist() == [[7, 4, 5]]
    td = ReplayBuffer(storage=storage())
    td.extend(TensorDict({"a": torch.ones(1, 2)}, batch_size=[1, 2]))
    assert td[:]["a"].tolist() == [[1.0, 1.0]]


def test_an_empty_selection_of_a_lazy_stack_storage_is_a_runtime_error():
    """torchrl: ``rb[:]`` of an empty LazyStackStorage, or an empty slice of a full one."""
    rb = ReplayBuffer(storage=LazyStackStorage(4))
    with pytest.raises(RuntimeError, match="zero items"):
        rb[:]
    rb.extend(torch.zeros(4, 2))
    with pytest.raises(RuntimeError, match="zero items"):
        rb[3:1]
    assert rb[1:3].shape == (2, 2)


@pytest.mark.parametrize("storage", [ListStorage, LazyTensorStorage])
def test_max_value_writer_refuses_complex_ranks_and_writes_nothing(storage):
    """torchrl: TypeError (complex values do not compare); rbdata wrote them."""
    rb = TensorDictReplayBuffer(storage=storage(4), writer=TensorDictMaxValueWriter(rank_key="r"))
    rb.extend(TensorDict({"r": torch.tensor([1.0, 2.0])}, batch_size=[2]))
    bad = TensorDict({"r": torch.tensor([3.0, 4.0], dtype=torch.complex64)}, batch_size=[2])
    with pytest.raises(TypeError, match="complex"):
        rb.extend(bad)
    assert (len(rb), rb.write_count) == (2, 2)


def test_the_next_without_replacement_pass_is_drawn_when_the_last_one_ends():
    """torchrl draws the next permutation in the call that ends a pass: same draws per seed."""

    def draws() -> list[list[int]]:
        rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=SamplerWithoutReplacement())
        rb.extend(torch.arange(4))
        out = []
        for seed in range(4):  # passes of 2 batches: a new pass at seeds 1 and 3
            torch.manual_seed(seed)
            out.append(rb.sample(2).tolist())
        return out

    torch.manual_seed(1)
    second_pass = torch.randperm(4).tolist()  # drawn in the call that ended the first pass
    got = draws()
    assert got[2] + got[3] == second_pass
    assert sorted(got[0] + got[1]) == [0, 1, 2, 3]
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=SamplerWithoutReplacement())
    rb.extend(torch.arange(2))
    rb.sample(2)  # ends a pass: the next one is drawn over 2 items
    rb.extend(torch.arange(2, 5))  # grown before the next pass began: drawn again over 5
    assert sorted(rb.sample(5).tolist()) == [0, 1, 2, 3, 4]


def test_a_refused_drop_last_sample_leaves_the_pass_as_it_was():
    """torchrl checks ``batch_size > len`` before drawing: the pass (and the RNG) stay."""
    rb = ReplayBuffer(
        storage=LazyTensorStorage(8),
        sampler=SamplerWithoutReplacement(drop_last=True),
        batch_size=2,
    )
    rb.extend(torch.arange(4))
    torch.manual_seed(0)
    first = rb.sample().tolist()
    state = rb.sampler.state_dict()
    rng = torch.get_rng_state()
    with pytest.raises(ValueError, match="greater than the storage capacity of 4"):
        rb.sample(5)
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(rb.sampler.state_dict()["perm"], state["perm"])
    assert sorted(first + rb.sample().tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("kind", ["lazy", "memmap"])
def test_extend_with_a_list_of_pytrees_stacks_them_leaf_by_leaf(kind, tmp_path):
    """torchrl: a list of PyTree items is stacked leaf-wise; mismatched items: RuntimeError."""
    storage = (
        LazyTensorStorage(20) if kind == "lazy" else LazyMemmapStorage(20, scratch_dir=tmp_path)
    )
    rb = ReplayBuffer(storage=storage, sampler=SamplerWithoutReplacement())
    items = [
        (
            torch.full((3,), i),
            {"a": torch.full((3,), i), "b": torch.full((2,), i)},
            [torch.full((1,), i)],
        )
        for i in range(10)
    ]
    assert rb.extend(items).tolist() == list(range(10))
    batch = rb.sample(10)
    for leaf in torch.utils._pytree.tree_leaves(batch):
        assert leaf.unique(sorted=True).tolist() == list(range(10))
    with pytest.raises(RuntimeError, match="Stacking the elements of the list"):
        rb.extend([torch.ones(4), torch.ones(1)])
    assert len(rb) == 10
