"""Parameter schedulers anneal a sampler's parameters (torchrl's schedulers' behaviour)."""

from __future__ import annotations

import pytest
import torch

from rbdata import (
    LambdaScheduler,
    LazyTensorStorage,
    LinearScheduler,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    SchedulerList,
    StepScheduler,
)


def test_linear_reaches_the_final_value_and_stays():
    sampler = PrioritizedSampler(10, alpha=0.7, beta=0.6)
    scheduler = LinearScheduler(sampler, "beta", final_value=1.0, num_steps=4)
    values = []
    for _ in range(6):
        scheduler.step()
        values.append(round(sampler.beta, 6))
    assert values == [0.7, 0.8, 0.9, 1.0, 1.0, 1.0]


def test_step_multiplies_every_n_steps_within_bounds():
    rb = PrioritizedReplayBuffer(alpha=0.8, beta=0.5, storage=LazyTensorStorage(10))
    scheduler = StepScheduler(rb, "alpha", gamma=0.5, n_steps=2, min_value=0.15)
    values = []
    for _ in range(6):
        scheduler.step()
        values.append(round(rb.sampler.alpha, 6))
    assert values == [0.8, 0.4, 0.4, 0.2, 0.2, 0.15]


def test_alpha_changes_retransform_the_stored_priorities():
    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0)
    sampler.extend(torch.arange(4))
    sampler.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 4.0, 8.0]))
    LambdaScheduler(sampler, "alpha", lambda n: 0.5).step()
    assert torch.allclose(sampler._sum_tree.leaves, torch.tensor([1.0, 2.0, 4.0, 8.0]).sqrt())


def test_scheduler_list_state_and_errors():
    sampler = PrioritizedSampler(10, alpha=0.7, beta=0.6)
    linear = LinearScheduler(sampler, "beta", 1.0, 2)
    both = SchedulerList(linear)
    both.append(StepScheduler(sampler, "alpha", gamma=0.5))
    both.step()
    state = linear.state_dict()
    assert state["_step_cnt"] == 1 and "sampler" not in state
    fresh = LinearScheduler(PrioritizedSampler(10, alpha=0.7, beta=0.6), "beta", 1.0, 2)
    fresh.load_state_dict(state)
    fresh.step()
    assert round(fresh.sampler.beta, 6) == 1.0
    with pytest.raises(ValueError, match="no attribute 'gamma'"):
        LinearScheduler(sampler, "gamma", 1.0, 2)
    with pytest.raises(TypeError, match="Sampler"):
        LinearScheduler(object(), "beta", 1.0, 2)
    with pytest.raises(ValueError, match="mode"):
        StepScheduler(sampler, "beta", mode="exponential")
