"""The sampler classes: abstract base classes, and torchrl's ``replacement=`` keyword.

``RandomSampler(replacement=False)`` / ``SliceSampler(replacement=False)`` build their
without-replacement variants through a plain ``__new__`` (no metaclass); every other
sampler takes ``replacement=True`` and refuses False.
"""

from __future__ import annotations

import abc
import copy
import inspect
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    ConsumingSampler,
    LazyTensorStorage,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    PromptGroupSampler,
    RandomSampler,
    ReplayBuffer,
    Sampler,
    SamplerEnsemble,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    StalenessAwareSampler,
    StreamingSliceSampler,
)

#: every sampler with no without-replacement variant, built with ``replacement=``
NO_VARIANT: dict[str, Callable[[bool], Sampler]] = {
    "prioritized": lambda r: PrioritizedSampler(10, 0.5, 0.5, replacement=r),
    "prioritized_slice": lambda r: PrioritizedSliceSampler(
        10, 0.5, 0.5, slice_len=2, replacement=r
    ),
    "consuming": lambda r: ConsumingSampler(replacement=r),
    "ensemble": lambda r: SamplerEnsemble(RandomSampler(), RandomSampler(), replacement=r),
    "staleness": lambda r: StalenessAwareSampler(replacement=r),
    "prompt_group": lambda r: PromptGroupSampler(num_groups=2, replacement=r),
    "streaming_slice": lambda r: StreamingSliceSampler(slice_len=2, replacement=r),
}


def test_a_constructor_without_the_keyword_builds_the_class_it_names() -> None:
    assert type(RandomSampler()) is RandomSampler
    assert type(RandomSampler(replacement=True)) is RandomSampler
    assert type(SamplerWithoutReplacement(drop_last=True)) is SamplerWithoutReplacement
    assert type(SliceSampler(slice_len=5)) is SliceSampler
    assert type(SliceSampler(slice_len=5, replacement=True)) is SliceSampler


def test_random_sampler_without_replacement_is_a_sampler_without_replacement() -> None:
    sampler = RandomSampler(replacement=False)
    assert type(sampler) is SamplerWithoutReplacement
    assert (sampler.drop_last, sampler.shuffle) == (False, True)
    sampler = RandomSampler(replacement=False, drop_last=True, shuffle=False)
    assert type(sampler) is SamplerWithoutReplacement
    assert (sampler.drop_last, sampler.shuffle) == (True, False)


def test_slice_sampler_without_replacement_gets_every_argument() -> None:
    sampler = SliceSampler(
        replacement=False,
        slice_len=5,
        drop_last=True,
        shuffle=False,
        traj_key="episode",
        strict_length=False,
    )
    assert type(sampler) is SliceSamplerWithoutReplacement
    assert isinstance(sampler, SliceSampler) and isinstance(sampler, SamplerWithoutReplacement)
    assert (sampler.slice_len, sampler.drop_last, sampler.shuffle) == (5, True, False)
    assert (sampler.traj_key, sampler.strict_length) == ("episode", False)


def test_the_slice_variant_is_initialised_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``__new__`` returns a SliceSampler subclass: Python runs its ``__init__``, once."""
    calls: list[dict[str, Any]] = []
    init = SliceSamplerWithoutReplacement.__init__

    def counting(self: SliceSamplerWithoutReplacement, **kwargs: Any) -> None:
        calls.append(kwargs)
        init(self, **kwargs)

    monkeypatch.setattr(SliceSamplerWithoutReplacement, "__init__", counting)
    SliceSampler(replacement=False, slice_len=5)
    assert calls == [{"replacement": False, "slice_len": 5}]


def test_the_random_variant_is_initialised_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    init = SamplerWithoutReplacement.__init__

    def counting(self: SamplerWithoutReplacement, **kwargs: Any) -> None:
        calls.append(kwargs)
        init(self, **kwargs)

    monkeypatch.setattr(SamplerWithoutReplacement, "__init__", counting)
    RandomSampler(replacement=False, drop_last=True)
    assert calls == [{"drop_last": True}]


def test_the_without_replacement_samplers_take_the_keyword_as_a_no_op() -> None:
    for replacement in (True, False):
        sampler = SamplerWithoutReplacement(replacement=replacement, drop_last=True)
        assert type(sampler) is SamplerWithoutReplacement and sampler.drop_last
        slices = SliceSamplerWithoutReplacement(replacement=replacement, slice_len=5)
        assert type(slices) is SliceSamplerWithoutReplacement and slices.slice_len == 5


@pytest.mark.parametrize("build", NO_VARIANT.values(), ids=NO_VARIANT.keys())
def test_a_sampler_with_no_variant_refuses_replacement_false(
    build: Callable[[bool], Sampler],
) -> None:
    assert isinstance(build(True), Sampler)
    with pytest.raises(TypeError, match="no without-replacement variant"):
        build(False)


def test_a_subclass_does_not_dispatch() -> None:
    sampler = PrioritizedSliceSampler(slice_len=5, max_capacity=10, alpha=0.5, beta=0.5)
    assert type(sampler) is PrioritizedSliceSampler

    class Mine(RandomSampler):
        pass

    assert type(Mine()) is Mine
    with pytest.raises(TypeError, match="Mine has no without-replacement variant"):
        Mine(replacement=False)


@pytest.mark.parametrize("value", [None, 0, "no"])
def test_replacement_must_be_a_bool(value: object) -> None:
    with pytest.raises(TypeError, match="replacement must be a bool"):
        RandomSampler(replacement=value)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="replacement must be a bool"):
        SamplerWithoutReplacement(replacement=value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="replacement must be a bool"):
        SliceSampler(replacement=value, slice_len=5)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "build",
    [
        lambda: RandomSampler(replacement=False, drop_last=True),
        lambda: SliceSampler(replacement=False, slice_len=3, shuffle=False),
        lambda: SliceSampler(slice_len=3),
        lambda: RandomSampler(),
    ],
    ids=["random_false", "slice_false", "slice", "random"],
)
def test_pickling_and_copying_keep_the_class(build: Callable[[], Sampler]) -> None:
    sampler = build()
    for copied in (pickle.loads(pickle.dumps(sampler)), copy.deepcopy(sampler)):
        assert type(copied) is type(sampler)
        assert vars(copied).keys() == vars(sampler).keys()


def test_state_dict_round_trip_of_a_dispatched_sampler() -> None:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(11),
        sampler=RandomSampler(replacement=False, drop_last=False),
        batch_size=3,
    )
    rb.extend(TensorDict({"a": torch.arange(11)}, [11]))
    rb.sample()
    other = RandomSampler(replacement=False)
    other.load_state_dict(rb.sampler.state_dict())
    assert torch.equal(other.state_dict()["perm"], rb.sampler.state_dict()["perm"])


def test_a_buffer_with_random_sampler_replacement_false_sees_each_item_once() -> None:
    torch.manual_seed(0)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(11),
        sampler=RandomSampler(replacement=False, drop_last=False),
        batch_size=3,
    )
    rb.extend(TensorDict({"a": torch.arange(11)}, [11]))
    seen = [a for _ in range(4) for a in rb.sample()["a"].tolist()]
    assert sorted(seen) == list(range(11))


def test_the_signatures_show_the_constructors() -> None:
    assert "replacement" in inspect.signature(RandomSampler).parameters
    assert "args" not in inspect.signature(RandomSampler).parameters
    assert "replacement" in inspect.signature(SliceSampler).parameters
    assert "args" not in inspect.signature(SliceSampler).parameters


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
