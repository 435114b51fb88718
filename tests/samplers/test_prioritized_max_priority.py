"""PrioritizedSampler's max-priority bookkeeping and exponents, as torchrl 0.14.1 keeps them.

torchrl tracks ``_max_priority = (raw max priority, its slot)`` in the raw
domain; ``default_priority`` is that raw value (the tree holds
``(p + eps) ** alpha``). Assigning ``alpha`` re-transforms written slots only,
and warns when leaving 0 only if priorities are held.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from rbdata import LazyTensorStorage, ReplayBuffer
from rbdata.samplers import PrioritizedSampler

EPS = 1e-8


@pytest.mark.parametrize("within_buffer", [False, True])
@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_max_priority_is_raw_and_names_its_slot(within_buffer, alpha):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(11),
        sampler=PrioritizedSampler(11, alpha, 1.0, max_priority_within_buffer=within_buffer),
    )
    assert rb.sampler._max_priority == (1.0, None)
    for item in range(20):
        rb.update_priority(rb.add(torch.tensor(item)), 21.0 - item)
        raw, slot = rb.sampler._max_priority
        if item <= 10 or not within_buffer:
            assert raw == pytest.approx(21.0, rel=1e-4) and slot == 0
        else:  # the oldest item still stored holds the largest priority
            assert raw == pytest.approx(31.0 - item, rel=1e-4) and slot == item - 10
            assert float(rb.sampler._sum_tree.leaves.max()) == pytest.approx(
                (31.0 - item + EPS) ** alpha, rel=1e-4
            )
        assert rb.sampler.default_priority == pytest.approx(raw)


@pytest.mark.parametrize("within_buffer", [False, True])
def test_alpha_zero_keeps_the_raw_max(within_buffer):
    sampler = PrioritizedSampler(5, 0.0, 0.9, max_priority_within_buffer=within_buffer)
    sampler.update_priority(torch.tensor([0, 1]), torch.tensor([100.0, 10.0]))
    sampler.update_priority(torch.tensor([0]), torch.tensor([50.0]))
    assert sampler._max_priority[0] == pytest.approx(100.0)
    assert sampler.default_priority == pytest.approx(100.0)
    sampler.mark_update(torch.tensor([2]))  # the tree still holds 1.0 for it (alpha = 0)
    assert float(sampler._sum_tree.leaves[2]) == 1.0


def test_alpha_is_validated_with_torchrls_words():
    with pytest.raises(ValueError, match="alpha must be greater or equal"):
        PrioritizedSampler(5, -1.0, 0.9)
    sampler = PrioritizedSampler(5, 0.7, 0.9)
    with pytest.raises(ValueError, match="alpha must be greater or equal"):
        sampler.alpha = -1.0
    with pytest.raises(TypeError, match="alpha"):
        sampler.alpha = "1"
    assert sampler.alpha == 0.7  # a refused value changes nothing


@pytest.mark.parametrize("within_buffer", [False, True])
@pytest.mark.parametrize("new_alpha", [0.5, 0.0])
def test_alpha_change_retransforms_written_slots_only(within_buffer, new_alpha):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=PrioritizedSampler(10, 1.0, 1.0, max_priority_within_buffer=within_buffer),
    )
    priorities = torch.arange(1.0, 7.0)
    rb.update_priority(rb.extend(torch.arange(6)), priorities)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rb.sampler.alpha = new_alpha
    leaves = rb.sampler._sum_tree.leaves
    expected = ((priorities.double() + EPS) ** new_alpha).float()
    torch.testing.assert_close(leaves[:6], expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(rb.sampler._min_tree.leaves[:6], expected, rtol=1e-4, atol=1e-6)
    assert (leaves[6:] == 0).all()  # never written: still 0, also for alpha = 0
    assert rb.sampler._max_priority[0] == pytest.approx(6.0, rel=1e-4)


def test_leaving_alpha_zero_warns_only_when_priorities_are_held():
    sampler = PrioritizedSampler(10, 0.0, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler.alpha = 0.5
        sampler.alpha = 0.0
    sampler.update_priority(torch.tensor([0, 1]), torch.tensor([3.0, 4.0]))
    with pytest.warns(UserWarning, match="away from 0"):
        sampler.alpha = 0.5
    assert sampler._sum_tree.leaves[:2].tolist() == [1.0, 1.0]  # kept until updated
    # new items get the largest raw priority seen, under the new exponent
    sampler.mark_update(torch.tensor([2]))
    assert float(sampler._sum_tree.leaves[2]) == pytest.approx((4.0 + EPS) ** 0.5, rel=1e-5)


def test_state_dict_carries_the_exponents_and_the_max():
    sampler = PrioritizedSampler(10, 0.8, 0.6)
    sampler.update_priority(torch.tensor([3, 4]), torch.tensor([2.0, 5.0]))
    other = PrioritizedSampler(10, 0.5, 0.5)
    other.load_state_dict(sampler.state_dict())
    assert (other.alpha, other.beta, other.eps) == (0.8, 0.6, sampler.eps)
    assert other._max_priority[0] == pytest.approx(5.0, rel=1e-5)
    assert other._max_priority[1] == 4
    with pytest.raises(ValueError, match="alpha"):
        other.load_state_dict({**sampler.state_dict(), "alpha": -1.0})
    assert other.alpha == 0.8  # a refused state changes nothing


def test_buffer_save_and_load_restore_the_exponents(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=PrioritizedSampler(10, 0.8, 0.6))
    rb.extend(torch.zeros(1, 3))
    rb.dumps(tmp_path)
    rb2 = ReplayBuffer(storage=LazyTensorStorage(10), sampler=PrioritizedSampler(10, 0.5, 0.5))
    rb2.extend(torch.ones(1, 3))
    rb2.loads(tmp_path)
    assert (rb2.sampler.alpha, rb2.sampler.beta) == (0.8, 0.6)
    assert rb2.sampler._max_priority == rb.sampler._max_priority
