"""The write path (rbdata/buffers/_write_path.py): consumed slots reused in ring order."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer


def _drained(capacity: int, consumed: int, seed: int = 0) -> tuple[ReplayBuffer, list[int]]:
    """A full buffer of ``capacity`` items, ``consumed`` of them consumed (in draw order)."""
    rb = ReplayBuffer(
        storage=LazyTensorStorage(capacity),
        consume_after_n_samples=1,
        generator=torch.Generator().manual_seed(seed),
    )
    rb.extend(torch.arange(capacity))
    drawn: list[int] = []
    while len(drawn) < consumed:
        _, info = rb.sample(min(7, consumed - len(drawn)), return_info=True)
        drawn += info["index"].tolist()
    return rb, drawn


@settings(deadline=None, max_examples=30)
@given(capacity=st.integers(2, 40), data=st.data())
def test_extend_fills_the_consumed_slots_in_ring_order(capacity, data):
    consumed = data.draw(st.integers(1, capacity))
    n = data.draw(st.integers(1, consumed))
    rb, drawn = _drained(capacity, consumed, data.draw(st.integers(0, 99)))
    index = rb.extend(torch.arange(100, 100 + n))
    assert index.tolist() == sorted(drawn)[:n]  # from slot 0 up, skipping live slots
    stored = rb.storage[:]
    for item, slot in enumerate(index.tolist()):
        assert int(stored[slot]) == 100 + item
    untouched = set(range(capacity)) - set(index.tolist())
    assert all(int(stored[s]) == s for s in untouched)
    assert len(rb) == capacity - consumed + n


def test_a_fully_consumed_buffer_is_rewritten_in_ring_order():
    """Every slot consumed: the next extend writes one run of slots (a slice per leaf)."""
    capacity = 300
    data = TensorDict(
        {"obs": torch.randn(capacity, 5), "next": {"done": torch.rand(capacity, 1) > 0.5}},
        [capacity],
    )
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), consume_after_n_samples=1)
    rb.extend(data)
    order: list[int] = []
    while len(rb):
        order += rb.sample(64, return_info=True)[1]["index"].tolist()
    fresh = data.apply(lambda t: t.flip(0))
    index = rb.extend(fresh)
    assert index.tolist() == list(range(capacity)) and sorted(order) == index.tolist()
    stored = rb.storage[index]
    assert torch.equal(stored["obs"], fresh["obs"])
    assert torch.equal(stored["next", "done"], fresh["next", "done"])


def test_a_write_larger_than_the_consumed_slots_continues_at_the_cursor():
    """3 slots consumed, 5 items: the consumed slots in ring order, then the cursor (0, 1),
    unless the cursor would land on a reused slot: then all 5 go round robin."""
    branches = set()
    for seed in range(40):
        rb, drawn = _drained(10, 3, seed)
        index = rb.extend(torch.arange(100, 105)).tolist()
        head = sorted(drawn)
        if 0 in head or 1 in head:
            assert index == [0, 1, 2, 3, 4]
        else:
            assert index == [*head, 0, 1]
        branches.add(0 in head or 1 in head)
    assert branches == {False, True}


def _sampler(name: str):
    from rbdata import PrioritizedSampler, RandomSampler, SamplerWithoutReplacement

    return {
        "random": lambda: RandomSampler(),
        "without_replacement": lambda: SamplerWithoutReplacement(),
        "prioritized": lambda: PrioritizedSampler(3000, alpha=0.7, beta=0.5),
    }[name]()


@pytest.mark.parametrize("sampler", ["random", "without_replacement", "prioritized"])
def test_every_consuming_sampler_rewrites_a_drained_buffer_as_one_ring_run(sampler):
    """Drained: one run from the reuse position (one slice per leaf); then the ring goes on."""
    capacity = 3000
    data = TensorDict({"obs": torch.arange(capacity).float().unsqueeze(1)}, [capacity])
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=_sampler(sampler),
        consume_after_n_samples=1,
        batch_size=256,
    )
    rb.extend(data)
    while len(rb):
        rb.sample()
    index = rb.extend(data[:2000] + 10_000)
    assert index.tolist() == list(range(2000))
    while len(rb):
        rb.sample()
    index = rb.extend(data + 20_000)  # from the slot after the last one reused, wrapping
    assert index.tolist() == [*range(2000, 3000), *range(2000)]
    assert torch.equal(rb.storage[index]["obs"], data["obs"] + 20_000)
    assert len(rb) == capacity


@pytest.mark.parametrize("storage", ["lazy", "memmap", "list"])
def test_setitem_goes_through_the_inverse_transforms_as_extend_does(storage):
    """torchrl's ``rb[index] = data`` applies ``transform.inv`` (an in-place write is a write)."""
    from tensordict import TensorDict

    from rbdata import LazyMemmapStorage, LazyTensorStorage, ListStorage, ReplayBuffer

    make = {"lazy": LazyTensorStorage, "memmap": LazyMemmapStorage, "list": ListStorage}[storage]
    collate = torch.stack if storage == "list" else None
    rb = ReplayBuffer(storage=make(20), collate_fn=collate)
    rb.append_transform(lambda x: x + 1, invert=True)  # on the way in
    rb.append_transform(lambda x: x * 10)  # on the way out
    rb.extend(TensorDict({"a": torch.arange(10)}, [10]))
    rb[3:5] = TensorDict({"a": torch.zeros(2, dtype=torch.long)}, [2])
    rb[torch.tensor([7])] = TensorDict({"a": torch.zeros(1, dtype=torch.long)}, [1])
    assert rb[:]["a"].tolist() == [10, 20, 30, 10, 10, 60, 70, 10, 90, 100]
    assert len(rb) == 10 and rb.writer.cursor == 10


def test_every_edit_moves_the_storage_revision_once():
    """``storage.revision`` says the content changed: writes, in-place edits, loads, empty."""
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(TensorDict({"obs": torch.arange(4)}, [4]))
    seen = [rb.storage.revision]
    for edit in (
        lambda: rb.__setitem__(0, TensorDict({"obs": torch.tensor(10)}, [])),
        lambda: rb.set_at_("obs", torch.tensor([11]), torch.tensor([1])),
        lambda: rb.set_("obs", torch.arange(4) + 20),
        lambda: rb.update_(TensorDict({"obs": torch.arange(4) + 30}, [4])),
        lambda: rb.load_state_dict(rb.state_dict()),
        rb.empty,
    ):
        edit()
        seen.append(rb.storage.revision)
    assert seen == list(range(seen[0], seen[0] + 7))


def test_add_of_a_batched_tensordict_warns_that_it_is_one_element():
    """As torchrl's: ``add`` of a TensorDict with batch dims stores it as one element."""
    from rbdata import ListStorage

    rb = ReplayBuffer(storage=ListStorage(10), batch_size=3)
    with pytest.warns(UserWarning, match=r"Using `add\(\)` with a TensorDict that has batch_size"):
        rb.add(TensorDict(batch_size=[1]))
    assert len(rb) == 1
