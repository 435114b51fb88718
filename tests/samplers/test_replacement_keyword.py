"""``replacement=`` (torchrl main's keyword): ``replacement=False`` builds the variant."""

from __future__ import annotations

import abc

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    ReplayBuffer,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)


def test_random_sampler_without_replacement_is_a_sampler_without_replacement() -> None:
    assert type(RandomSampler(replacement=True)) is RandomSampler
    sampler = RandomSampler(replacement=False, drop_last=True, shuffle=False)
    assert type(sampler) is SamplerWithoutReplacement
    assert sampler.drop_last is True and sampler.shuffle is False
    default = RandomSampler(replacement=False)
    assert default.drop_last is False and default.shuffle is True


def test_slice_sampler_without_replacement_forwards_its_arguments() -> None:
    assert type(SliceSampler(replacement=True, slice_len=5)) is SliceSampler
    sampler = SliceSampler(
        replacement=False, slice_len=5, drop_last=True, shuffle=False, traj_key="episode"
    )
    assert type(sampler) is SliceSamplerWithoutReplacement
    assert (sampler.slice_len, sampler.drop_last, sampler.shuffle) == (5, True, False)
    assert sampler.traj_key == "episode" and isinstance(sampler, SliceSampler)
    assert isinstance(sampler, SamplerWithoutReplacement)  # as torchrl's class


def test_variants_accept_it_and_others_refuse_it() -> None:
    assert type(SamplerWithoutReplacement(replacement=False)) is SamplerWithoutReplacement
    assert type(SliceSamplerWithoutReplacement(replacement=False, slice_len=2)) is (
        SliceSamplerWithoutReplacement
    )
    slices = PrioritizedSliceSampler(10, 0.5, 0.5, slice_len=5, replacement=True)
    assert type(slices) is PrioritizedSliceSampler  # the dispatch is on the exact class
    with pytest.raises(TypeError, match="PrioritizedSampler has no without-replacement variant"):
        PrioritizedSampler(10, 0.5, 0.5, replacement=False)
    with pytest.raises(TypeError, match="PrioritizedSliceSampler has no without-replacement"):
        PrioritizedSliceSampler(10, 0.5, 0.5, slice_len=5, replacement=False)
    with pytest.raises(TypeError, match=r"replacement must be a bool, got int \(0\)"):
        RandomSampler(replacement=0)


def test_a_buffer_with_random_sampler_without_replacement_hands_out_each_item_once() -> None:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(11), sampler=RandomSampler(replacement=False), batch_size=3
    )
    rb.extend(TensorDict({"a": torch.arange(11)}, [11]))
    seen = [x for _ in range(4) for x in rb.sample()["a"].tolist()]
    assert sorted(seen) == list(range(11))


def test_samplers_stay_abstract_base_classes() -> None:
    class Mine(Sampler, abc.ABC):  # torchrl's Sampler is an ABC: mixing one in works
        @abc.abstractmethod
        def extra(self) -> None: ...

    with pytest.raises(TypeError, match="abstract"):
        Mine()
