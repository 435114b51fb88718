"""``update_priority(batch)`` with one argument is ``update_tensordict_priority(batch)``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)


def make(seed: int) -> TensorDictPrioritizedReplayBuffer:
    return TensorDictPrioritizedReplayBuffer(
        alpha=0.8,
        beta=0.6,
        storage=LazyTensorStorage(16),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=6,
        generator=torch.Generator().manual_seed(seed),
    )


def fill(rb: TensorDictPrioritizedReplayBuffer, start: int, n: int) -> None:
    ids = torch.arange(start, start + n)
    rb.extend(TensorDict({"id": ids}, [n]))


@given(
    seed=st.integers(0, 2**16),
    errors=st.lists(st.floats(0.0, 50.0), min_size=6, max_size=6),
    rewrite=st.integers(0, 10),
)
def test_one_argument_does_what_update_tensordict_priority_does(seed, errors, rewrite):
    ours, reference = make(seed), make(seed)
    for rb in (ours, reference):
        fill(rb, 0, 12)
    batches = []
    for rb in (ours, reference):
        batch = rb.sample()
        batch.set("td_error", torch.tensor(errors))
        fill(rb, 100, rewrite)  # rows rewritten since the sample keep their priority
        batches.append(batch)
    ours.update_priority(batches[0])
    reference.update_tensordict_priority(batches[1])
    leaves = [rb.sampler.state_dict()["leaves"] for rb in (ours, reference)]
    assert torch.equal(*leaves)
    assert ours.stats() == reference.stats()
    assert torch.equal(ours.sample()["id"], reference.sample()["id"])


def test_the_two_argument_form_is_unchanged():
    rb = make(0)
    fill(rb, 0, 4)
    rb.update_priority(torch.tensor([1, 2]), torch.tensor([5.0, 7.0]))
    leaves = rb.sampler.state_dict()["leaves"]
    assert leaves[1] > leaves[0] and leaves[2] > leaves[1]


def test_a_missing_priority_without_a_tensordict_is_a_type_error():
    rb = make(0)
    fill(rb, 0, 4)
    before = rb.sampler.state_dict()["leaves"].clone()
    with pytest.raises(TypeError, match="one sampled TensorDict, got Tensor"):
        rb.update_priority(torch.tensor([0, 1]))
    batch = rb.sample().set("td_error", torch.ones(6))
    with pytest.raises(TypeError, match="and a generation"):
        rb.update_priority(batch, generation=batch["index_generation"])
    assert torch.equal(rb.sampler.state_dict()["leaves"], before)


def test_a_batch_without_the_priority_key_gets_the_default_priority():
    rb = make(0)
    fill(rb, 0, 4)
    batch = rb.sample()
    rb.update_priority(batch.set("td_error", torch.full((batch.shape[0],), 50.0)))
    rb.update_priority(rb.sample().exclude("td_error"))  # torchrl: the sampler's default
    sampler = rb.sampler
    stored = sampler._sum_tree[batch["index"]]  # type: ignore[attr-defined]
    assert bool((stored > 0).all())
    assert sampler.default_priority == pytest.approx(50.0)  # the max priority seen


def test_a_non_prioritized_tensordict_buffer_warns_as_for_update_tensordict_priority():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), batch_size=2)
    rb.extend(TensorDict({"id": torch.arange(8)}, [8]))
    batch = rb.sample().set("td_error", torch.ones(2))
    with pytest.warns(UserWarning, match="not prioritized: the priorities are ignored"):
        rb.update_priority(batch)  # as update_tensordict_priority: a warning, nothing else


def test_a_transition_unit_batch_without_priorities_updates_to_the_default() -> None:
    from rbdata import TensorDictPrioritizedReplayBuffer, Transition

    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.9, storage=LazyTensorStorage(10), batch_size=4, sample_unit=Transition()
    )
    rb.extend(TensorDict({"obs": torch.randn(10, 3)}, batch_size=[10]))
    sample = rb.sample()
    assert sample.batch_size[0] == 4
    before = rb.sampler._sum_tree[sample["index"]].clone()  # type: ignore[attr-defined]
    rb.update_tensordict_priority(sample)
    assert torch.allclose(rb.sampler._sum_tree[sample["index"]], before)  # type: ignore[attr-defined]
