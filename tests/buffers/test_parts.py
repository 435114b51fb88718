"""The buffer as explicit parts: one _Components, one object per concern, no mixin bag."""

from __future__ import annotations

import pickle

import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    PrioritizedReplayBuffer,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)


def _rbdata_classes(cls: type) -> list[str]:
    return [k.__name__ for k in cls.__mro__ if k.__module__.startswith("rbdata")]


def test_the_buffer_classes_have_short_mros():
    assert _rbdata_classes(ReplayBuffer) == ["ReplayBuffer", "_SharedHandle", "_BufferBase"]
    assert len(_rbdata_classes(TensorDictReplayBuffer)) == 4
    assert len(_rbdata_classes(PrioritizedReplayBuffer)) == 4
    assert len(_rbdata_classes(TensorDictPrioritizedReplayBuffer)) == 5


def test_every_part_holds_the_buffers_one_components():
    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    parts = (rb._writes, rb._reads, rb._edits, rb._priorities, rb._state)
    assert all(part._components is rb._components for part in parts)
    previous = rb.set_sampler(SamplerWithoutReplacement())
    assert isinstance(previous, RandomSampler)
    assert all(isinstance(p._components.sampler, SamplerWithoutReplacement) for p in parts)


def test_a_reader_shares_the_rows_and_draws_with_its_own_sampler():
    rb = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=4)
    rb.extend(torch.arange(4))
    reader = rb.reader(SamplerWithoutReplacement())
    assert type(reader) is ReplayBuffer and reader.storage is rb.storage
    assert reader.sampler is not rb.sampler and reader.lock is not rb.lock
    assert sorted(reader.sample().tolist()) == [0, 1, 2, 3]
    rb.extend(torch.arange(4, 8))  # written through the buffer: the reader follows
    assert sorted(reader.sample(8).tolist()) == list(range(8))
    assert reader._writes._components is reader._components is not rb._components


def test_a_pickled_buffer_builds_its_parts_again():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(4), priority_key="err"
    )
    rb.extend(TensorDict({"obs": torch.arange(4.0), "err": torch.zeros(4)}, [4]))
    copy = pickle.loads(pickle.dumps(rb))
    assert copy.priority_key == "err" and len(copy) == 4
    assert copy._writes._components is copy._components is not rb._components
    copy.extend(TensorDict({"obs": torch.ones(1), "err": torch.tensor([7.0])}, [1]))
    assert copy.sample(3)["index"].tolist() == [0, 0, 0]  # the written priority counted


def test_batch_priority_updates_go_through_the_buffers_update_priority():
    seen = []

    class Logged(TensorDictPrioritizedReplayBuffer):
        def update_priority(self, index, priority, *, generation=None):
            seen.append(index.tolist())
            super().update_priority(index, priority, generation=generation)

    rb = Logged(alpha=1.0, beta=1.0, storage=LazyTensorStorage(4), batch_size=2)
    rb.extend(TensorDict({"obs": torch.arange(4.0)}, [4]))
    batch = rb.sample().set("td_error", torch.ones(2))
    rb.update_tensordict_priority(batch)
    rb.update_batch_priority(batch, torch.ones(2))
    assert seen == [batch["index"].tolist()] * 2
