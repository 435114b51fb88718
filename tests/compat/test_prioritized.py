"""Prioritized sampling: draws proportional to priority**alpha, importance weights, updates.

Statistical properties, not exact draws: each test runs on both libraries where
torchrl's sum tree loads (torch 2.14) and on rbdata alone otherwise, checking the
formula torchrl 0.14.1 implements: P(i) = p_i / sum(p), p_i = (priority_i + eps)**alpha,
weight_i = (p_i / min(p)) ** -beta (float32), new items get the largest priority seen.
"""

from __future__ import annotations

import pytest
import torch

from ._describe import outcome
from ._libs import load

N = 8
ALPHA, BETA, EPS = 0.7, 0.5, 1e-8


def _buffer(ns, alpha=ALPHA, beta=BETA, n=N):
    rb = ns.ReplayBuffer(
        storage=ns.LazyTensorStorage(n),
        sampler=ns.PrioritizedSampler(n, alpha, beta),
        batch_size=4,
    )
    rb.extend(torch.arange(n))
    return rb


def _frequencies(rb, draws=16000, batch=400):
    counts = torch.zeros(len(rb))
    for _ in range(draws // batch):
        counts += torch.bincount(rb.sample(batch), minlength=len(rb)).float()
    return counts / counts.sum()


def test_draws_proportional_to_priority_power_alpha(prio_lib):
    torch.manual_seed(0)
    rb = _buffer(prio_lib)
    priority = torch.arange(1.0, N + 1)
    rb.update_priority(torch.arange(N), priority)
    p = (priority + EPS) ** ALPHA
    expected = p / p.sum()
    assert torch.allclose(_frequencies(rb), expected, atol=0.015)


def test_importance_weights_formula(prio_lib):
    torch.manual_seed(1)
    rb = _buffer(prio_lib)
    priority = torch.arange(1.0, N + 1)
    rb.update_priority(torch.arange(N), priority)
    _, info = rb.sample(64, return_info=True)
    p = (priority + EPS) ** ALPHA
    weight = info["priority_weight"]
    assert weight.dtype == torch.float32
    assert torch.allclose(weight, ((p[info["index"]] / p.min()) ** -BETA).float())


def test_new_items_get_the_largest_priority_seen(prio_lib):
    torch.manual_seed(2)
    rb = _buffer(prio_lib, alpha=1.0, n=8)
    rb.empty()
    rb.extend(torch.arange(4))
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 5.0]))
    rb.extend(torch.arange(4, 6))
    freq = _frequencies(rb)
    assert torch.allclose(freq, torch.tensor([1, 1, 1, 5, 5, 5]) / 18.0, atol=0.015)


def test_scalar_priority_broadcasts_and_int_index(prio_lib):
    torch.manual_seed(3)
    rb = _buffer(prio_lib, alpha=1.0)
    rb.update_priority(torch.arange(N), 1.0)
    rb.update_priority(3, 9.0)
    freq = _frequencies(rb)
    assert abs(freq[3].item() - 9 / 16) < 0.02


def test_zero_priorities_everywhere_still_sample(prio_lib):
    rb = _buffer(prio_lib)
    rb.update_priority(torch.arange(N), torch.zeros(N))
    assert rb.sample().shape == (4,)


def test_alpha_zero_is_uniform(prio_lib):
    torch.manual_seed(4)
    rb = _buffer(prio_lib, alpha=0.0)
    rb.update_priority(torch.arange(N), torch.arange(1.0, N + 1))
    assert torch.allclose(_frequencies(rb), torch.full((N,), 1 / N), atol=0.015)


@pytest.mark.parametrize("alpha,beta", [(-1.0, 0.5), (0.5, -0.5)])
def test_negative_alpha_or_beta_is_a_value_error(prio_lib, alpha, beta):
    assert outcome(lambda: prio_lib.PrioritizedSampler(N, alpha, beta)) == ("raises", "ValueError")


def test_prefilled_storage_samples_before_any_write(prio_lib, request):
    rb = prio_lib.ReplayBuffer(
        storage=prio_lib.TensorStorage(torch.arange(N)),
        sampler=prio_lib.PrioritizedSampler(N, ALPHA, BETA),
        writer=prio_lib.ImmutableDatasetWriter(),
        batch_size=4,
    )
    data, info = rb.sample(return_info=True)
    assert data.shape == (4,)
    assert torch.equal(info["priority_weight"], torch.ones(4))


# Deliberate (rbdata validates before writing; torchrl writes whatever it is given).
@pytest.mark.parametrize(
    "index,priority",
    [
        ([0], [-1.0]),
        ([0], [float("nan")]),
        ([0], [float("inf")]),
        ([20], [1.0]),
        ([0, 1], [1.0, 2.0, 3.0]),
        ([0, 1], [[1.0, 3.0], [2.0, 4.0]]),
    ],
    ids=["negative", "nan", "inf", "out-of-range", "length-mismatch", "2d"],
)
def test_bad_priority_update_is_a_value_error_and_changes_nothing(index, priority):
    ns = load("rbdata")
    torch.manual_seed(5)
    rb = _buffer(ns, alpha=1.0)
    rb.update_priority(torch.arange(N), torch.arange(1.0, N + 1))
    before = _frequencies(rb, draws=4000)
    err = outcome(lambda: rb.update_priority(torch.tensor(index), torch.tensor(priority)))
    assert err == ("raises", "ValueError")
    assert torch.allclose(_frequencies(rb, draws=4000), before, atol=0.03)
