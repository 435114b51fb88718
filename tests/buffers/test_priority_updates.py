"""A buffer's priority updates (rbdata/buffers/_priority_updates.py): validated once."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rbdata
import rbdata.buffers._priority_updates as updates_module
import rbdata.samplers._priority_checks as checks_module


def _buffer(n: int = 16, reduction: str = "max", generations: bool = False) -> rbdata.ReplayBuffer:
    rb = rbdata.ReplayBuffer(
        storage=rbdata.LazyTensorStorage(n),
        sampler=rbdata.PrioritizedSampler(n, 0.7, 0.5, reduction=reduction),
        writer=rbdata.RoundRobinWriter(track_generations=generations),
    )
    rb.extend(torch.arange(n))
    return rb


def test_a_prioritized_update_reads_its_bounds_once(monkeypatch):
    calls = []
    real = checks_module.update_bounds
    monkeypatch.setattr(checks_module, "update_bounds", lambda *a: calls.append(1) or real(*a))

    def refuse(*args):
        raise AssertionError("the buffer's own checks ran for a prioritized sampler")

    monkeypatch.setattr(updates_module, "check_priority_update", refuse)
    rb = _buffer(generations=True)
    _, info = rb.sample(8, return_info=True)
    rb.update_priority(info["index"], torch.rand(8))
    rb.update_priority(info["index"], torch.rand(8), generation=info["index_generation"])
    rb.update_priority(torch.tensor([3]), 2.0)
    assert len(calls) == 3


def test_skipped_entries_do_not_count_towards_the_largest_priority():
    """The bounds checked before the generation filter are not the kept entries' bounds."""
    rb = _buffer(generations=True)
    index = torch.tensor([1, 2, 3])
    generation = rb.writer.generations_of(index)
    rb.extend(torch.arange(1))  # round robin: slot 0 rewritten; then rewrite slot 1
    rb.extend(torch.arange(1))
    rb.update_priority(index, torch.tensor([50.0, 2.0, 3.0]), generation=generation)
    assert rb.stats()["skipped_priority_updates"] == 1
    assert rb.sampler.default_priority == pytest.approx(3.0)  # raw, as torchrl


@pytest.mark.parametrize(
    ("index", "priority", "error"),
    [
        (torch.tensor([1.5]), 1.0, TypeError),
        (torch.tensor([True, False]), 1.0, TypeError),
        (torch.tensor([16]), 1.0, ValueError),
        (torch.tensor([-1]), 1.0, ValueError),
        (torch.tensor([1, 2]), torch.tensor([1.0, float("nan")]), ValueError),
        (torch.tensor([1, 2]), torch.tensor([1.0, 2.0, 3.0]), ValueError),
        (torch.tensor([1]), torch.tensor([1e300], dtype=torch.float64), ValueError),  # inf in f32
    ],
)
def test_a_bad_update_raises_and_changes_nothing(index, priority, error):
    rb = _buffer()
    before = rb.sampler.state_dict()
    with pytest.raises(error):
        rb.update_priority(index, priority)
    after = rb.sampler.state_dict()
    assert torch.equal(after["leaves"], before["leaves"])
    assert after["max_priority"] == before["max_priority"]


@settings(max_examples=60, deadline=None)
@given(
    slots=st.lists(st.integers(0, 15), min_size=1, max_size=12),
    values=st.lists(st.floats(0, 100), min_size=1, max_size=12),
    reduction=st.sampled_from(["max", "min", "mean", "median", "sum"]),
    scalar=st.booleans(),
)
def test_a_buffer_update_is_the_samplers_own(slots, values, reduction, scalar):
    """Through the buffer or straight to the sampler, an update leaves the same priorities."""
    values = (values * len(slots))[: len(slots)]
    priority = torch.tensor(values[0]) if scalar else torch.tensor(values)
    through, direct = _buffer(reduction=reduction), _buffer(reduction=reduction)
    through.update_priority(torch.tensor(slots), priority)
    direct.sampler.update_priority(torch.tensor(slots), priority)
    assert torch.equal(through.sampler._tree.leaves, direct.sampler._tree.leaves)
    assert through.sampler.default_priority == direct.sampler.default_priority
