"""The sampler classes: abstract base classes whose constructors build the class they name."""

from __future__ import annotations

import abc

import pytest

from rbdata import (
    PrioritizedSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)


@pytest.mark.parametrize(
    "build",
    [
        lambda: RandomSampler(replacement=False),  # type: ignore[call-arg]
        lambda: SliceSampler(replacement=False, slice_len=5),  # type: ignore[call-arg]
        lambda: PrioritizedSampler(10, 0.5, 0.5, replacement=False),  # type: ignore[call-arg]
    ],
    ids=["random", "slice", "prioritized"],
)
def test_replacement_keyword_is_refused(build: object) -> None:
    """torchrl main's ``replacement=False`` builds another class; rbdata refuses the keyword."""
    with pytest.raises(TypeError, match="replacement"):
        build()  # type: ignore[operator]


def test_a_constructor_builds_the_class_it_names() -> None:
    assert type(RandomSampler()) is RandomSampler
    assert type(SamplerWithoutReplacement(drop_last=True)) is SamplerWithoutReplacement
    assert type(SliceSampler(slice_len=5)) is SliceSampler


def test_slice_sampler_without_replacement_is_a_sampler_without_replacement() -> None:
    sampler = SliceSamplerWithoutReplacement(slice_len=5)
    assert isinstance(sampler, SliceSampler)
    assert isinstance(sampler, SamplerWithoutReplacement)  # a virtual subclass, as torchrl's


def test_samplers_stay_abstract_base_classes() -> None:
    class Mine(Sampler, abc.ABC):  # torchrl's Sampler is an ABC: mixing one in works
        @abc.abstractmethod
        def extra(self) -> None: ...

    with pytest.raises(TypeError, match="abstract"):
        Mine()  # type: ignore[abstract]
