"""torchrl's ``replacement=`` keyword on every sampler (``Cls(replacement=False)``)."""

from __future__ import annotations

import pytest
import torch

from rbdata import (
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)


def test_random_sampler_without_replacement_is_a_sampler_without_replacement():
    sampler = RandomSampler(replacement=False, drop_last=True, shuffle=False)
    assert type(sampler) is SamplerWithoutReplacement
    assert (sampler.drop_last, sampler.shuffle) == (True, False)
    rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=sampler, batch_size=2)
    rb.extend(torch.arange(4))
    assert [b.tolist() for b in rb] == [[0, 1], [2, 3]]


def test_replacement_true_and_variants_are_no_ops():
    assert type(RandomSampler(replacement=True)) is RandomSampler
    assert type(SamplerWithoutReplacement(replacement=False)) is SamplerWithoutReplacement
    assert type(SamplerWithoutReplacement(replacement=True)) is SamplerWithoutReplacement


def test_slice_sampler_without_replacement():
    sampler = SliceSampler(replacement=False, num_slices=2, traj_key="episode")
    assert type(sampler) is SliceSamplerWithoutReplacement
    assert sampler.num_slices == 2


def test_a_sampler_without_a_variant_refuses_replacement_false():
    with pytest.raises(TypeError, match="no without-replacement variant"):
        PrioritizedSampler(10, 0.7, 0.5, replacement=False)
    with pytest.raises(TypeError, match="replacement must be a bool"):
        RandomSampler(replacement="no")
