"""torchrl API behaviours rbdata reproduces (each checked against torchrl 0.14.1's)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict, tensorclass

from rbdata import (
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSliceSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictReplayBuffer,
    TensorStorage,
)


@tensorclass
class Step:
    obs: torch.Tensor
    inner: TensorDict
    note: str


def steps(n: int) -> Step:
    return Step(
        obs=torch.arange(n, dtype=torch.float32),
        inner=TensorDict({"x": torch.arange(n)}, batch_size=[n]),
        note="same for all",
        batch_size=[n],
    )


@pytest.mark.parametrize("storage", [LazyTensorStorage, LazyMemmapStorage])
def test_tensorclass_data_comes_back_as_its_class(storage):
    rb = ReplayBuffer(storage=storage(10), batch_size=4)
    rb.extend(steps(6))
    batch = rb.sample()
    assert type(batch) is Step and batch.batch_size == torch.Size([4])
    assert torch.equal(batch.obs.long(), batch.inner["x"]) and batch.note == "same for all"
    clone = ReplayBuffer(storage=storage(10))
    clone.load_state_dict(rb.state_dict())
    assert torch.equal(clone[:6].obs, rb[:6].obs)


@pytest.mark.parametrize("storage", [LazyTensorStorage, LazyMemmapStorage])
def test_storage_dumps_and_loads_into_a_fresh_storage(storage, tmp_path):
    source = storage(10)
    data = {"a": torch.arange(3), "b": {"c": [torch.ones(3), (-torch.ones(3, 2),)]}}
    source.set(range(3), data)
    source.dumps(tmp_path / "s")
    source.dumps(tmp_path / "s")  # twice is fine
    restored = storage(10)
    restored.loads(tmp_path / "s")
    assert len(restored) == 3 and torch.equal(restored[:]["b"]["c"][1][0], -torch.ones(3, 2))


def test_pytree_batches_wrap_around_the_end():
    rb = ReplayBuffer(storage=LazyTensorStorage(3))
    data = {"a": torch.arange(5), "b": (torch.arange(5) * 2,)}
    assert rb.extend(data).tolist() == [0, 1, 2, 0, 1]
    assert rb.writer.cursor == 2
    assert rb[:]["a"].tolist() == [3, 4, 2] and rb[:]["b"][0].tolist() == [6, 8, 4]


def test_slice_sampler_uses_trajectory_ids_when_stored_else_end_flags():
    done = torch.zeros(20, 1, dtype=torch.bool)
    done[[9, 19]] = True
    with_ids = TensorDict({"episode": torch.arange(20) // 10, "done": done}, [20])
    without_ids = TensorDict({"done": done}, [20])
    for data in (with_ids, without_ids):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(20),
            sampler=SliceSampler(slice_len=5, traj_key="episode", end_key="done"),
            batch_size=10,
        )
        rb.extend(data)
        index = rb.sample()["index"].view(2, 5)
        assert ((index // 10) == (index[:, :1] // 10)).all()  # never across episodes


def test_prioritized_slice_sampler_keeps_only_a_right_span():
    sampler = PrioritizedSliceSampler(10, 1.0, 1.0, slice_len=2, span=[True, True])
    assert sampler.span == (False, True)


def test_drop_last_needs_a_batch_size_at_construction():
    with pytest.raises(ValueError, match="predictable batch-size"):
        ReplayBuffer(storage=ListStorage(10), sampler=SamplerWithoutReplacement(drop_last=True))


def test_empty_tensordict_storage_is_filled_by_the_first_write():
    rb = ReplayBuffer(storage=TensorStorage(TensorDict(batch_size=[5])))
    assert len(rb) == 0
    rb.extend(TensorDict({"a": torch.arange(5)}, [5]))
    assert rb[:]["a"].tolist() == list(range(5))


def test_storage_keyword_arguments_of_torchrl():
    ListStorage(10, compilable=True, device="cpu")
    stack = LazyStackStorage(10, stack_dim=-1)
    stack.set(0, TensorDict({"a": torch.zeros(3)}, [3]))
    stack.set(1, TensorDict({"a": torch.ones(3)}, [3]))
    assert stack.get(torch.tensor([0, 1])).batch_size == torch.Size([3, 2])
    LazyTensorStorage(10, compilable=True, consolidated=True, cleanup_memmap=False)
    RoundRobinWriter(compilable=True)


def test_memmap_cleanup_removes_the_scratch_dir(tmp_path):
    scratch = tmp_path / "scratch"
    storage = LazyMemmapStorage(10, scratch_dir=scratch, auto_cleanup=True)
    ReplayBuffer(storage=storage).extend(torch.arange(4))
    assert scratch.is_dir()
    assert storage.cleanup() is True and not scratch.exists()
    assert storage.cleanup() is False
    assert (
        LazyMemmapStorage(10)._auto_cleanup
        and not LazyMemmapStorage(10, scratch_dir=scratch)._auto_cleanup
    )


def test_entries_by_key_and_in_place_edits_are_checked_first():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=5)
    rb.extend(TensorDict({"a": torch.zeros(10), "b": torch.ones(10)}, batch_size=[10]))
    rb.set_at_("a", torch.tensor([99.0, 99.0]), torch.tensor([2, 5]))
    assert rb["a"].tolist() == [0, 0, 99, 0, 0, 99, 0, 0, 0, 0] and (rb["b"] == 1).all()
    rb.set_("b", torch.full((10,), 42.0))
    assert (rb["b"] == 42).all()
    before = rb[:]
    with pytest.raises(ValueError, match="does not fit"):
        rb.set_("a", torch.ones(3))
    with pytest.raises(TypeError, match="integers"):
        rb.set_at_("a", 1.0, torch.tensor([1.5]))
    with pytest.raises(ValueError, match="outside"):
        rb.set_at_("a", 1.0, torch.tensor([10]))
    assert (rb[:] == before).all()
