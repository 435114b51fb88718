"""Tests of the wide sum tree behind PrioritizedSampler."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rbdata.samplers import _sumtree
from rbdata.samplers._sumtree import _FANOUT, _SumTree


@pytest.fixture(params=[4, _sumtree._MAX_TOP], ids=["deep", "flat-top"])
def max_top(request, monkeypatch):
    """Build trees with a tiny top level (several levels even for small capacities) or the
    default one."""
    monkeypatch.setattr(_sumtree, "_MAX_TOP", request.param)
    return request.param


def _build(capacity: int, max_top: int, dtype=torch.float64, track_max=False) -> _SumTree:
    old = _sumtree._MAX_TOP
    _sumtree._MAX_TOP = max_top
    try:
        return _SumTree(capacity, dtype, track_max=track_max)
    finally:
        _sumtree._MAX_TOP = old


def _check_structure(tree: _SumTree) -> None:
    """Every parent is recomputed from its children: sums up to the rounding of the summation
    order (no drift accumulates), maxima exactly, minima exactly once refreshed (they are
    refreshed lazily; a leaf's own minimum is its value when positive, else ``inf``). The
    minimum kept across updates equals the one recomputed from scratch."""
    leaves = tree._sum[-1]
    expected = float(torch.where(leaves > 0, leaves, float("inf")).min())
    assert tree.min == expected
    assert tree._argmin == -1 or float(leaves[tree._argmin]) == expected
    tree._min_value = None  # force the lazy refresh of the parents' minima
    assert tree.min == expected
    assert not tree._dirty.any()
    for depth in range(len(tree._sum) - 1, 0, -1):
        m = tree._sum[depth].numel() // _FANOUT
        kids = tree._sum[depth].view(-1, _FANOUT)
        torch.testing.assert_close(tree._sum[depth - 1][:m], kids.sum(1))
        if depth == len(tree._sum) - 1:
            low, high = torch.where(kids > 0, kids, float("inf")), kids
        else:
            low = tree._min[depth].view(-1, _FANOUT)
            high = tree._max[depth].view(-1, _FANOUT) if tree._max is not None else None
        assert torch.equal(tree._min[depth - 1][:m], low.amin(1))
        if tree._max is not None:
            assert torch.equal(tree._max[depth - 1][:m], high.amax(1))


updates = st.lists(
    st.tuples(
        st.lists(st.integers(0, 10_000), min_size=1, max_size=40, unique=True),
        st.floats(0, 100),
    ),
    min_size=1,
    max_size=8,
)


@given(
    capacity=st.integers(1, 3000),
    max_top=st.sampled_from([1, 4, 50, 32768]),
    ops=updates,
    track_max=st.booleans(),
)
def test_totals_min_max_match_leaves(capacity, max_top, ops, track_max):
    tree = _build(capacity, max_top, track_max=track_max)
    gen = torch.Generator().manual_seed(capacity)
    expected = torch.zeros(capacity, dtype=torch.float64)
    for raw_index, scale in ops:
        index = torch.tensor([i % capacity for i in raw_index]).unique()
        values = torch.rand(index.numel(), generator=gen, dtype=torch.float64) * scale
        values[::3] = 0.0
        tree.update(index, values)
        expected[index] = values
    assert torch.equal(tree.leaves, expected)
    assert tree.total == pytest.approx(float(expected.sum()), rel=1e-12, abs=1e-12)
    positive = expected[expected > 0]
    assert tree.min == (float(positive.min()) if positive.numel() else float("inf"))
    if track_max:
        assert tree.max == float(expected.max())
    _check_structure(tree)


@given(
    capacity=st.integers(1, 2000),
    max_top=st.sampled_from([1, 4, 32768]),
    seed=st.integers(0, 2**31),
)
def test_find_is_consistent_with_prefix_sums(capacity, max_top, seed):
    gen = torch.Generator().manual_seed(seed)
    tree = _build(capacity, max_top)
    leaves = torch.rand(capacity, generator=gen, dtype=torch.float64)
    leaves[torch.rand(capacity, generator=gen) < 0.3] = 0.0
    tree.set_leaves(leaves)
    total = float(leaves.sum())
    if total == 0:
        return
    mass = torch.rand(64, generator=gen, dtype=torch.float64) * total * 0.999999
    found = tree.find(mass)
    prefix = torch.cat([torch.zeros(1, dtype=torch.float64), leaves.cumsum(0)])
    lo, hi = prefix[found], prefix[found + 1]
    assert bool((leaves[found] > 0).all())
    assert bool((lo <= mass + 1e-9).all()) and bool((mass < hi + 1e-9).all())


def test_set_leaves_matches_updates(max_top):
    gen = torch.Generator().manual_seed(0)
    values = torch.rand(5000, generator=gen)
    values[::7] = 0
    bulk = _SumTree(5000)
    bulk.set_leaves(values)
    stepwise = _SumTree(5000)
    for start in range(0, 5000, 1000):
        stepwise.update(torch.arange(start, start + 1000), values[start : start + 1000])
    for a, b in zip(bulk._sum, stepwise._sum, strict=True):
        torch.testing.assert_close(a, b)
    assert bulk.min == stepwise.min == float(values[values > 0].min())
    _check_structure(bulk)


def test_sample_frequencies_follow_leaves(max_top):
    tree = _SumTree(40)
    leaves = torch.zeros(40)
    leaves[[3, 17, 30, 39]] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    tree.set_leaves(leaves)
    gen = torch.Generator().manual_seed(1)
    counts = torch.zeros(40)
    for _ in range(50):
        index, values = tree.sample_with_values(200, gen)
        assert torch.equal(values, leaves[index])
        counts += torch.bincount(index, minlength=40)
    assert counts[leaves == 0].sum() == 0
    freq = counts[[3, 17, 30, 39]] / counts.sum()
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.01, rtol=0)


def test_sample_is_stratified_and_unsorted():
    tree = _SumTree(1000)
    tree.set_leaves(torch.ones(1000))
    index = tree.sample(100, torch.Generator().manual_seed(0))
    # one draw per stratum of 10 leaves, in random order
    assert sorted((index // 10).tolist()) == list(range(100))
    assert not bool((index.diff() >= 0).all())


def test_sample_all_zero_raises():
    tree = _SumTree(10)
    with pytest.raises(RuntimeError, match="every priority is 0"):
        tree.sample(4, None)


def test_constructor_validation():
    with pytest.raises(ValueError, match="capacity"):
        _SumTree(0)
    with pytest.raises(TypeError, match="dtype"):
        _SumTree(10, torch.long)
    with pytest.raises(RuntimeError, match="track_max"):
        _ = _SumTree(10).max


def test_level_sizes_at_one_million():
    sizes = _sumtree._level_sizes(1_000_000)
    assert sizes == [31_250, 1_000_000]
    assert _sumtree._level_sizes(10) == [10]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_dtypes_are_stored_as_float32(dtype):
    tree = _SumTree(40, dtype)
    assert tree.dtype == torch.float32 and tree.leaves.dtype == torch.float32
    tree.update(torch.tensor([3, 7]), torch.tensor([1.0, 3.0], dtype=dtype))
    assert tree.total == 4.0 and tree.min == 1.0
    index, values = tree.sample_with_values(64, torch.Generator().manual_seed(0))
    assert set(index.tolist()) == {3, 7} and torch.equal(values, tree.leaves[index])


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_update_merges_repeated_indices(reduce, max_top):
    tree = _SumTree(3000)
    tree.update(torch.tensor([5, 2000, 5, 5]), torch.tensor([1.0, 2.0, 4.0, 3.0]), reduce=reduce)
    assert float(tree.leaves[5]) == (4.0 if reduce == "amax" else 1.0)
    assert tree.total == float(tree.leaves[5]) + 2.0
    _check_structure(tree)


def test_min_follows_updates_of_the_leaf_holding_it(max_top):
    tree = _SumTree(3000, torch.float64)
    base = torch.linspace(1, 2, 3000, dtype=torch.float64)
    tree.update(torch.arange(3000), base)
    assert tree.min == 1.0
    tree.update(torch.tensor([0]), torch.tensor([5.0]))  # the minimum's leaf goes up
    assert tree.min == float(base[1])
    tree.update(torch.tensor([2999, 7]), torch.tensor([0.5, 0.0]))  # a new minimum, a zero
    assert tree.min == 0.5
    tree.update(torch.tensor([2999]), torch.tensor([0.0]))  # zeros never count
    assert tree.min == float(base[1])
    tree.update(torch.arange(3000), torch.zeros(3000, dtype=torch.float64))
    assert tree.min == float("inf")
    _check_structure(tree)
