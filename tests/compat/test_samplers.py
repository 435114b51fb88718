"""Uniform and without-replacement sampling: distributions, passes, iteration, batch sizes."""

from __future__ import annotations

import pytest
import torch

from ._describe import outcome
from ._libs import load, parity_gap


def _filled(ns, n, sampler=None, batch_size=4, capacity=16):
    kwargs = {"sampler": sampler} if sampler is not None else {}
    rb = ns.ReplayBuffer(storage=ns.LazyTensorStorage(capacity), batch_size=batch_size, **kwargs)
    rb.extend(torch.arange(n))
    return rb


def test_random_sampler_is_uniform(lib):
    torch.manual_seed(0)
    rb = _filled(lib, 8, lib.RandomSampler())
    counts = sum(torch.bincount(rb.sample(400), minlength=8) for _ in range(40)).float()
    assert torch.allclose(counts / counts.sum(), torch.full((8,), 1 / 8), atol=0.012)


def test_random_sampler_draws_with_replacement(lib):
    torch.manual_seed(0)
    rb = _filled(lib, 3, lib.RandomSampler())
    assert rb.sample(50).shape == (50,)


def test_random_iteration_does_not_end(lib):
    rb = _filled(lib, 6)
    batches = 0
    for _ in rb:
        batches += 1
        if batches == 50:
            break
    assert batches == 50


@pytest.mark.parametrize(
    "n,batch_size,drop_last",
    [(10, 4, False), (10, 4, True), (8, 4, False), (3, 4, False), (1, 1, False)],
)
def test_without_replacement_passes(n, batch_size, drop_last):
    """Every item once per pass, the same batch lengths as torchrl, pass after pass."""
    shapes = {}
    for name in ("torchrl", "rbdata"):
        ns = load(name)
        rb = _filled(ns, n, ns.SamplerWithoutReplacement(drop_last=drop_last), batch_size)
        first, second = [b.tolist() for b in rb], [b.tolist() for b in rb]
        items = sorted(sum(first, []))
        assert len(set(items)) == len(items)  # no item twice in a pass
        if not drop_last:
            assert items == list(range(n))
        shapes[name] = ([len(b) for b in first], [len(b) for b in second], rb.sample().shape)
    assert shapes["rbdata"] == shapes["torchrl"]


def test_without_replacement_unshuffled_order(lib):
    rb = _filled(lib, 7, lib.SamplerWithoutReplacement(shuffle=False), batch_size=3)
    assert [b.tolist() for b in rb] == [[0, 1, 2], [3, 4, 5], [6]]


def test_without_replacement_drop_last_batch_larger_than_buffer(lib, request):
    rb = _filled(lib, 3, lib.SamplerWithoutReplacement(drop_last=True), batch_size=4)
    assert outcome(rb.sample) == ("raises", "ValueError")


def test_without_replacement_extend_mid_pass_restarts_the_pass(lib, request):
    """torchrl starts a new permutation over all items when the storage grew mid-pass."""
    parity_gap(
        request,
        lib,
        "SamplerWithoutReplacement: after an extend mid-pass rbdata finishes the old pass "
        "without the new items; torchrl starts a new pass over all of them",
    )
    rb = _filled(lib, 6, lib.SamplerWithoutReplacement(), batch_size=3)
    rb.sample()
    rb.extend(torch.arange(6, 9))
    rest = sorted(sum((b.tolist() for b in rb), []))
    assert rest == list(range(9))


@pytest.mark.parametrize(
    "batch_size,expected",
    [
        (0, ("Tensor", (0,), "torch.int64")),
        (-1, ("raises", "RuntimeError")),
        (2.0, ("raises", "TypeError")),
    ],
    ids=["zero", "negative", "float"],
)
def test_sample_batch_size_edge_cases(lib, request, batch_size, expected):
    if batch_size in (0, -1):
        parity_gap(
            request,
            lib,
            "sample(batch_size=0|-1) raises ValueError; torchrl: an empty batch / RuntimeError",
        )
    rb = _filled(lib, 4)
    assert outcome(lambda: rb.sample(batch_size)) == expected


def test_sample_without_any_batch_size(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4))
    rb.extend(torch.arange(4))
    assert outcome(rb.sample) == ("raises", "RuntimeError")


def test_iterating_an_empty_buffer(lib, request):
    parity_gap(
        request, lib, "iterating an empty buffer yields nothing; torchrl raises RuntimeError"
    )
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4), batch_size=2)
    assert outcome(lambda: list(rb)) == ("raises", "RuntimeError")


def test_sampling_an_empty_buffer_is_a_runtime_error(lib):
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(4), batch_size=2)
    assert outcome(rb.sample) == ("raises", "RuntimeError")


def _next_pass_after_a_load(ns, seed):
    """The draws of a sampler loaded at the end of a pass, after the storage grew by one."""
    torch.manual_seed(seed)
    rb = ns.ReplayBuffer(storage=ns.LazyTensorStorage(16), sampler=ns.SamplerWithoutReplacement())
    rb.extend(torch.ones(3))
    for _ in range(3):
        rb.sample(1)
    rb.extend(torch.zeros(1))
    state = rb.state_dict()
    other = ns.ReplayBuffer(
        storage=ns.LazyTensorStorage(16), sampler=ns.SamplerWithoutReplacement()
    )
    other.load_state_dict(state)
    return [other.sample(1).tolist() for _ in range(4)]


@pytest.mark.parametrize("seed", range(4))
def test_a_loaded_pass_drawn_ahead_is_drawn_again_when_the_storage_grew(seed):
    """torchrl's ``test_sampler_without_rep_state_dict``: the new item comes in the next pass."""
    expected = _next_pass_after_a_load(load("torchrl"), seed)
    assert _next_pass_after_a_load(load("rbdata"), seed) == expected
    assert sorted(sum(expected, [])) == [0.0, 1.0, 1.0, 1.0]
