"""What the sharing layer asks of the components: protocols it names, capabilities they declare."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rbdata import (
    ConsumingSampler,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    Sequence,
    SliceSampler,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Transition,
)
from rbdata.sharing.components import Cursor, Draws, Rows, SharesMemory, WriteNotes
from rbdata.sharing.eligibility import can_reserve, redraws_freely
from rbdata.sharing.parts import share_transform
from rbdata.sharing.ring import ring_ranges, ring_slots
from rbdata.transforms import Transform


@pytest.mark.parametrize(
    "storage", [LazyTensorStorage(4), LazyMemmapStorage(4), ListStorage(4)], ids=type
)
def test_storages_are_rows(storage: Any) -> None:
    assert isinstance(storage, Rows)


@pytest.mark.parametrize("writer", [RoundRobinWriter(), TensorDictMaxValueWriter()], ids=type)
def test_writers_are_cursors(writer: Any) -> None:
    assert isinstance(writer, Cursor)


def test_samplers_and_units_declare_what_sharing_asks() -> None:
    assert isinstance(RandomSampler(), Draws)
    assert isinstance(PrioritizedSampler(8, 0.7, 0.5), Draws)
    assert isinstance(Transition(), WriteNotes)
    assert isinstance(Sequence(2), WriteNotes)


def test_sampler_capabilities_are_declared_per_class_not_inherited() -> None:
    assert RandomSampler().reads_only_length and RandomSampler().draws_independent
    assert SamplerWithoutReplacement().reads_only_length
    assert not SamplerWithoutReplacement().draws_independent
    # a subclass may keep state its base does not: it says so itself
    consuming = ConsumingSampler(2)
    assert not consuming.reads_only_length and not consuming.draws_independent

    class Counting(RandomSampler):
        pass

    class Declared(RandomSampler):
        reads_only_length = True
        draws_independent = True

    assert not Counting().reads_only_length and not Counting().draws_independent
    assert Declared().reads_only_length and Declared().draws_independent


def test_a_unit_tracks_trajectories_when_it_overrides_extend() -> None:
    assert not Transition().tracks_trajectories
    assert Sequence(2).tracks_trajectories


def test_which_parts_reserve_their_rows() -> None:
    assert can_reserve(RoundRobinWriter(), RandomSampler(), Transition())
    assert can_reserve(TensorDictRoundRobinWriter(), SamplerWithoutReplacement(), Transition())
    # traced counters (compilable), a writer out of ring order, a sampler or unit keeping
    # state of the writes: the write takes the lock
    assert not can_reserve(RoundRobinWriter(compilable=True), RandomSampler(), Transition())
    assert not can_reserve(TensorDictMaxValueWriter(), RandomSampler(), Transition())
    assert not can_reserve(RoundRobinWriter(), PrioritizedSampler(8, 0.7, 0.5), Transition())
    assert not can_reserve(RoundRobinWriter(), SliceSampler(num_slices=2), Transition())
    assert not can_reserve(RoundRobinWriter(), ConsumingSampler(2), Transition())
    assert not can_reserve(RoundRobinWriter(), RandomSampler(), Sequence(2))


def test_only_independent_draws_are_drawn_again() -> None:
    assert redraws_freely(RandomSampler())
    assert not redraws_freely(SamplerWithoutReplacement())
    assert not redraws_freely(ConsumingSampler(2))
    assert not redraws_freely(PrioritizedSampler(8, 0.7, 0.5))


class _Shared:
    def __init__(self) -> None:
        self.calls = 0

    def share_memory_(self) -> _Shared:
        self.calls += 1
        return self


class _Stateful(Transform):
    def __init__(self) -> None:
        super().__init__()
        self.shared = 0

    def share_memory_(self) -> _Stateful:
        self.shared += 1
        return self


def test_share_transform_moves_what_has_write_state() -> None:
    transform, other = _Stateful(), _Shared()
    assert isinstance(transform, SharesMemory) and isinstance(other, SharesMemory)
    share_transform(transform)
    share_transform(other)
    share_transform(lambda data: data)  # a plain callable keeps no write state
    assert (transform.shared, other.calls) == (1, 1)


def test_ring_arithmetic() -> None:
    assert ring_ranges(2, 3, 8) == (2, 5, 0, 0)
    assert ring_ranges(6, 4, 8) == (6, 8, 0, 2)
    assert ring_slots(6, 4, 8).tolist() == [6, 7, 0, 1]
    first = ring_slots(0, 3, 8)
    first += 1  # the returned tensor is the caller's: the cached one stays
    assert torch.equal(ring_slots(0, 3, 8), torch.arange(3))
