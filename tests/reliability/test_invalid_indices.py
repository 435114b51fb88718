"""Indices must be integer tensors or ints within the written range, on every entry point.

A call with any other index raises and leaves the buffer exactly as it was.
A handle on a never-written slot is only stale for ``update_if_present`` (as in
torchrl): nothing is patched and nothing raises.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
)

C, WRITTEN = 5, 3


def make(sampler: str) -> ReplayBuffer:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(C),
        sampler=PrioritizedSampler(C, alpha=1.0, beta=1.0)
        if sampler == "prioritized"
        else RandomSampler(),
        writer=RoundRobinWriter(track_generations=True),
        generator=torch.Generator().manual_seed(0),
    )
    ids = torch.arange(WRITTEN)
    rb.extend(
        TensorDict({"id": ids, "x": ids[:, None].float().expand(WRITTEN, 2).clone()}, [WRITTEN])
    )
    return rb


def same_state(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
        )
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


BAD_INDICES = {
    "float 1.5": (1.5, None),
    "float tensor [1.5]": (torch.tensor([1.5]), None),
    "bool True": (True, None),
    "bool mask": (torch.tensor([True, False, True]), None),
    "past the capacity": (torch.tensor([C]), None),
    "never written slot": (torch.tensor([WRITTEN]), None),
    "negative": (torch.tensor([-1]), None),
    "negative with a generation": (torch.tensor([-1]), torch.tensor([1])),
}


def cases() -> list[Any]:
    out = []
    for entry in ("update_priority", "update_if_present", "set_at_"):
        for sampler in ("prioritized", "random"):
            for case in BAD_INDICES:
                if entry == "update_if_present" and case == "never written slot":
                    continue  # a stale handle, as torchrl has it: see the test below
                out.append(pytest.param(entry, sampler, case, id=f"{entry}-{sampler}-{case}"))
    return out


@pytest.mark.parametrize("sampler", ["prioritized", "random"])
def test_update_if_present_treats_a_never_written_slot_as_stale(sampler):
    rb = make(sampler)
    before = rb.state_dict()
    result = rb.update_if_present(
        index=torch.tensor([WRITTEN]),
        generation=torch.tensor([0]),
        patch={"x": torch.full((1, 2), 9.0)},
    )
    assert result.stale_count == 1 and result.updated_count == 0
    assert same_state(rb.state_dict(), before)


@pytest.mark.parametrize(("entry", "sampler", "case"), cases())
def test_a_bad_index_raises_and_changes_nothing(entry, sampler, case):
    rb = make(sampler)
    before = rb.state_dict()
    index, generation = BAD_INDICES[case]
    with pytest.raises((ValueError, TypeError, IndexError)):
        if entry == "update_priority":
            rb.update_priority(index, 2.0, generation=generation)
        elif entry == "set_at_":
            rb.set_at_("x", torch.full((2,), 9.0), index)
        else:
            n = len(index) if isinstance(index, torch.Tensor) else 1
            rb.update_if_present(
                index=index,
                generation=generation
                if generation is not None
                else torch.ones(n, dtype=torch.long),
                patch={"x": torch.full((n, 2), 9.0)},
            )
    assert same_state(rb.state_dict(), before)
