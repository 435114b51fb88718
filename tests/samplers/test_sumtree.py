"""Tests of the wide sum trees behind PrioritizedSampler: the CPU tree (numpy fast paths) and
the device tree (pure torch), which runs on the CPU everywhere and on CUDA where there is one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbdata.samplers import _device_sumtree
from rbdata.samplers._device_sumtree import _FANOUT, _DeviceSumTree
from rbdata.samplers._sumtree import _sum_tree, _SumTree, _tree_on

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")

# (tree class, device): the CPU tree, the device tree forced onto the CPU, the device tree on CUDA
KINDS = {
    "cpu": (_SumTree, "cpu"),
    "torch-cpu": (_DeviceSumTree, "cpu"),
    "cuda": (_DeviceSumTree, "cuda"),
}
KIND_PARAMS = [pytest.param(name, marks=needs_cuda) if name == "cuda" else name for name in KINDS]
HOST_KINDS = ["cpu", "torch-cpu"]


@pytest.fixture(params=KIND_PARAMS)
def kind(request):
    return request.param


@pytest.fixture(params=[4, _device_sumtree._MAX_TOP], ids=["deep", "flat-top"])
def max_top(request, monkeypatch):
    """Build trees with a tiny top level (several levels even for small capacities) or the
    default one."""
    monkeypatch.setattr(_device_sumtree, "_MAX_TOP", request.param)
    return request.param


def _build(kind: str, capacity: int, dtype=torch.float64, track_max=False, max_top=None):
    cls, device = KINDS[kind]
    old = _device_sumtree._MAX_TOP
    if max_top is not None:
        _device_sumtree._MAX_TOP = max_top
    try:
        if cls is _SumTree:
            return _SumTree(capacity, dtype, track_max=track_max)
        return _DeviceSumTree(capacity, dtype, track_max=track_max, device=device)
    finally:
        _device_sumtree._MAX_TOP = old


def _check_structure(tree: _DeviceSumTree) -> None:
    """Every parent is recomputed from its children: sums up to the rounding of the summation
    order (no drift accumulates), minima and maxima exactly (the CPU tree refreshes its minima
    lazily, so they are checked after a forced refresh; a leaf's own minimum is its value when
    positive, else ``inf``). The minimum kept across updates equals the one recomputed."""
    leaves = tree._sum[-1]
    expected = float(torch.where(leaves > 0, leaves, float("inf")).min())
    assert tree.min == expected
    if isinstance(tree, _SumTree):
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


@pytest.mark.parametrize("kind", HOST_KINDS)
@given(
    capacity=st.integers(1, 3000),
    max_top=st.sampled_from([1, 4, 50, 32768]),
    ops=updates,
    track_max=st.booleans(),
)
def test_totals_min_max_match_leaves(kind, capacity, max_top, ops, track_max):
    tree = _build(kind, capacity, track_max=track_max, max_top=max_top)
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


@pytest.mark.parametrize("kind", HOST_KINDS)
@given(
    capacity=st.integers(1, 2000),
    max_top=st.sampled_from([1, 4, 32768]),
    seed=st.integers(0, 2**31),
)
def test_find_is_consistent_with_prefix_sums(kind, capacity, max_top, seed):
    gen = torch.Generator().manual_seed(seed)
    tree = _build(kind, capacity, max_top=max_top)
    leaves = torch.rand(capacity, generator=gen, dtype=torch.float64)
    leaves[torch.rand(capacity, generator=gen) < 0.3] = 0.0
    tree.set_leaves(leaves)
    total = float(leaves.sum())
    if total == 0:
        return
    mass = torch.rand(64, generator=gen, dtype=torch.float64) * total * 0.999999
    mass[:2] = torch.tensor([0.0, total])  # the very ends land on positive leaves too
    found = tree.find(mass)
    prefix = torch.cat([torch.zeros(1, dtype=torch.float64), leaves.cumsum(0)])
    lo, hi = prefix[found], prefix[found + 1]
    assert bool((leaves[found] > 0).all())
    inner = mass[2:]
    assert bool((lo[2:] <= inner + 1e-9).all()) and bool((inner < hi[2:] + 1e-9).all())


dyadic_leaves = st.lists(st.integers(0, 64), min_size=1, max_size=3000)


@given(
    counts=dyadic_leaves,
    max_top=st.sampled_from([1, 4, 32768]),
    seed=st.integers(0, 2**31),
    k=st.integers(1, 300),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_cpu_and_device_trees_draw_the_same_leaves(counts, max_top, seed, k, dtype):
    """Leaves of multiples of 1/8 make every sum exact, so both trees hold the same numbers and
    must return the same draws for the same generator state, update after update."""
    leaves = torch.tensor(counts, dtype=dtype) / 8
    if not leaves.sum() > 0:
        return
    trees = [_build(kind, len(counts), dtype, True, max_top) for kind in HOST_KINDS]
    gen = torch.Generator().manual_seed(seed)
    for tree in trees:
        tree.set_leaves(leaves)
    for _ in range(3):
        if not trees[0].total > 0:
            break
        state = gen.get_state()
        draws = []
        for tree in trees:
            gen.set_state(state)
            draws.append(tree.sample_with_values(k, gen))
        (index, values), (other_index, other_values) = draws
        assert torch.equal(index, other_index) and torch.equal(values, other_values)
        assert bool((values > 0).all())
        new = torch.randint(0, 64, (k,), generator=gen).to(dtype) / 8
        for tree in trees:
            tree.update(index, new, reduce="amax")
        a, b = trees
        assert a.total == b.total and a.min == b.min and a.max == b.max
        assert torch.equal(a.leaves, b.leaves)


def test_set_leaves_matches_updates(kind, max_top):
    gen = torch.Generator().manual_seed(0)
    values = torch.rand(5000, generator=gen)
    values[::7] = 0
    bulk = _build(kind, 5000, torch.float32)
    bulk.set_leaves(values)
    stepwise = _build(kind, 5000, torch.float32)
    for start in range(0, 5000, 1000):
        stepwise.update(torch.arange(start, start + 1000), values[start : start + 1000])
    for a, b in zip(bulk._sum, stepwise._sum, strict=True):
        torch.testing.assert_close(a, b)
    assert bulk.min == stepwise.min == float(values[values > 0].min())
    _check_structure(bulk)
    _check_structure(stepwise)


def test_sample_frequencies_follow_leaves(kind, max_top):
    tree = _build(kind, 40, torch.float32)
    leaves = torch.zeros(40)
    leaves[[3, 17, 30, 39]] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    tree.set_leaves(leaves)
    gen = torch.Generator(device=tree.device).manual_seed(1)
    counts = torch.zeros(40)
    for _ in range(50):
        index, values = tree.sample_with_values(200, gen)
        assert index.device == values.device == tree.device
        index, values = index.cpu(), values.cpu()
        assert torch.equal(values, leaves[index])
        counts += torch.bincount(index, minlength=40)
    assert counts[leaves == 0].sum() == 0
    freq = counts[[3, 17, 30, 39]] / counts.sum()
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.01, rtol=0)


def test_sample_is_stratified_and_unsorted(kind):
    tree = _build(kind, 1000, torch.float32)
    tree.set_leaves(torch.ones(1000))
    index = tree.sample(100, torch.Generator(device=tree.device).manual_seed(0)).cpu()
    # one draw per stratum of 10 leaves, in random order
    assert sorted((index // 10).tolist()) == list(range(100))
    assert not bool((index.diff() >= 0).all())


@pytest.mark.parametrize("kind", HOST_KINDS)
def test_sample_all_zero_raises(kind):
    tree = _build(kind, 10)
    with pytest.raises(RuntimeError, match="every priority is 0"):
        tree.sample(4, None)


def test_find_on_an_all_zero_tree_stays_in_range(kind, max_top):
    """The device tree does not check for an empty tree (that would wait for the device):
    its draws must still be valid slots."""
    tree = _build(kind, 3000)
    found = tree.find(torch.rand(64, dtype=torch.float64)).cpu()
    assert bool(((found >= 0) & (found < 3000)).all())


@pytest.mark.parametrize("cls", [_SumTree, _DeviceSumTree])
def test_constructor_validation(cls):
    with pytest.raises(ValueError, match="capacity"):
        cls(0)
    with pytest.raises(TypeError, match="dtype"):
        cls(10, torch.long)
    with pytest.raises(RuntimeError, match="track_max"):
        _ = cls(10).max


def test_level_sizes_at_one_million():
    sizes = _device_sumtree._level_sizes(1_000_000)
    assert sizes == [31_250, 1_000_000]
    assert _device_sumtree._level_sizes(10) == [10]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_dtypes_are_stored_as_float32(kind, dtype):
    tree = _build(kind, 40, dtype)
    assert tree.dtype == torch.float32 and tree.leaves.dtype == torch.float32
    tree.update(torch.tensor([3, 7]), torch.tensor([1.0, 3.0], dtype=dtype))
    assert tree.total == 4.0 and tree.min == 1.0
    gen = torch.Generator(device=tree.device).manual_seed(0)
    index, values = tree.sample_with_values(64, gen)
    assert set(index.tolist()) == {3, 7} and torch.equal(values, tree.leaves[index])


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_update_merges_repeated_indices(kind, reduce, max_top):
    tree = _build(kind, 3000, torch.float32)
    tree.update(torch.tensor([5, 2000, 5, 5]), torch.tensor([1.0, 2.0, 4.0, 3.0]), reduce=reduce)
    assert float(tree.leaves[5]) == (4.0 if reduce == "amax" else 1.0)
    assert tree.total == float(tree.leaves[5]) + 2.0
    _check_structure(tree)


def test_min_follows_updates_of_the_leaf_holding_it(kind, max_top):
    tree = _build(kind, 3000, torch.float64)
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


def test_tensor_summaries_live_on_the_device(kind):
    tree = _build(kind, 100, torch.float32, track_max=True)
    tree.update(torch.tensor([1, 50]), torch.tensor([2.0, 6.0]))
    for value, expected in (
        (tree.total_tensor, 8.0),
        (tree.min_tensor, 2.0),
        (tree.max_tensor, 6.0),
    ):
        assert value.shape == () and value.device.type == tree.device.type
        assert float(value) == expected


def test_factory_picks_the_cpu_tree_and_moves_trees_between_devices():
    assert type(_sum_tree(10)) is _SumTree
    assert type(_sum_tree(10, device="cpu")) is _SumTree
    tree = _sum_tree(100, torch.float64, track_max=True)
    tree.update(torch.tensor([4, 9]), torch.tensor([1.0, 3.0]))
    assert _tree_on(tree, "cpu") is tree
    device = "cuda" if CUDA else "meta"
    if CUDA:
        moved = _tree_on(tree, device)
        assert type(moved) is _DeviceSumTree and moved.device.type == "cuda"
        assert moved.total == 4.0 and moved.max == 3.0 and moved.min == 1.0
        back = _tree_on(moved, "cpu")
        assert type(back) is _SumTree and torch.equal(back.leaves, tree.leaves)
    else:
        moved = _tree_on(tree, device)
        assert type(moved) is _DeviceSumTree and moved.device.type == "meta"


@needs_cuda
def test_cuda_sample_and_update_never_wait_for_the_host():
    tree = _sum_tree(1_000_000, device="cuda")
    tree.set_leaves(torch.rand(1_000_000, device="cuda") + 0.01)
    gen = torch.Generator(device="cuda").manual_seed(0)
    tree.total_tensor  # noqa: B018 - the prefix sums computed once, outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            index, values = tree.sample_with_values(4096, gen)
            weight = (values / tree.min_tensor).pow(-0.5)
            tree.update(index, torch.rand(4096, device="cuda") + 0.01, reduce="amax")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert bool((weight <= 1).all()) and index.device.type == "cuda"
    _check_structure(tree)


def _edge_leaves(capacity: int, data: st.DataObject) -> torch.Tensor:
    """Leaves with zeros next to positive ones where rounding bites: the first and last leaf,
    both sides of row edges (31 | 32), whole zero rows, and trailing zeros up to capacity."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    leaves = torch.from_numpy(10 ** rng.uniform(-4, 3, capacity))  # sums that round
    leaves[torch.from_numpy(rng.random(capacity) < data.draw(st.sampled_from([0, 0.4])))] = 0.0
    zeros = data.draw(st.lists(st.integers(0, capacity - 1), max_size=capacity // 2))
    edges = [0, capacity - 1, *range(_FANOUT - 1, capacity, _FANOUT)]
    edges += [e + 1 for e in edges if e + 1 < capacity]
    leaves[torch.tensor(zeros + data.draw(st.lists(st.sampled_from(edges)))).long()] = 0.0
    if capacity > 2 * _FANOUT and data.draw(st.booleans()):
        leaves[_FANOUT : 2 * _FANOUT] = 0.0  # a whole zero row
    if data.draw(st.booleans()):
        leaves[capacity - data.draw(st.integers(0, capacity // 3)) :] = 0.0
    if not leaves.sum() > 0:
        leaves[capacity // 2] = 1.0
    return leaves


def _node_edges(tree: _SumTree) -> np.ndarray:
    """Where every node of every level starts, in the tree's own arithmetic (the top's prefix
    sums, then each row's running sums of its stored values from its parent's start): the masses
    at which rounding across levels bites."""
    starts = tree._p[:-1].copy()
    out = [tree._p]
    for level in tree._s[1:]:
        rows = level.reshape(-1, _FANOUT)
        starts = starts[: rows.shape[0]]  # padding nodes past the last row have no children
        inclusive = np.cumsum(rows, axis=1, dtype=rows.dtype)
        starts = (starts[:, None] + (inclusive - rows)).reshape(-1)
        out.append(starts)
    return np.concatenate(out)


@settings(deadline=None)
@given(
    capacity=st.integers(1, 3000),
    max_top=st.sampled_from([1, 4, 32768]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    data=st.data(),
)
def test_draws_at_stratum_edges_and_zero_neighbours(capacity, max_top, dtype, data):
    """The sampling search (no clamps; zero-valued landings and rows passed above the leaves
    searched again) returns a positive leaf whose range holds the mass, for masses exactly on
    every node's and leaf's edges, an ulp either side of them, at 0 and at the total (where a
    stratum's mass rounds up to it)."""
    tree = _build("cpu", capacity, dtype, max_top=max_top)
    leaves = _edge_leaves(capacity, data).to(dtype)
    tree.set_leaves(leaves)
    total = tree.total
    leaf_edges = torch.cat([torch.zeros(1, dtype=dtype), leaves.cumsum(0)]).numpy()
    edges = np.concatenate([_node_edges(tree), leaf_edges])
    zero = edges.dtype.type(0)
    mass = np.concatenate(
        [edges, np.nextafter(edges, zero), np.nextafter(edges, edges.dtype.type(np.inf))]
    )
    mass = np.clip(mass, 0, edges.dtype.type(total))
    mass = np.concatenate([mass, [0, total]]).astype(edges.dtype)
    found, values = tree._draw(mass)
    assert (values > 0).all() and np.array_equal(values, tree.leaves.numpy()[found])
    # the leaf whose prefix range holds the mass, up to the rounding of the tree's sums (a
    # range narrower than that, like a tiny leaf at the very end, may go to its neighbour)
    exact = np.concatenate([[0.0], np.cumsum(leaves.double().numpy())])
    slack = 8 * len(tree._sum) * np.finfo(edges.dtype).eps * float(total)
    lo, hi = exact[found], exact[found + 1]
    assert ((lo - slack <= mass) & (mass < hi + slack)).all()
    # where it differs from the clamped search (``tree._find``), it is on such ties: the
    # range check above holds for both; how often they tie depends on the leaves (an example
    # of tiny float32 leaves ties on a fifth of the edges), so no share of agreement is pinned


@pytest.mark.parametrize("u", ["zero", "just below one"])
def test_sampled_strata_edges_land_on_positive_leaves(monkeypatch, u):
    """Each stratum's mass at its very start (u = 0) or end (u = 1 - ulp, which rounds the
    last stratum up to the total): zero leaves on both sides of row edges are never drawn."""
    capacity = 40 * _FANOUT
    leaves = torch.rand(capacity, generator=torch.Generator().manual_seed(0)) + 0.5
    leaves[_FANOUT - 1 :: _FANOUT] = 0.0  # the last leaf of every row
    leaves[_FANOUT::_FANOUT] = 0.0  # the first leaf of the next one
    leaves[-3 * _FANOUT :] = 0.0  # trailing zero rows
    tree = _build("cpu", capacity, torch.float32, max_top=4)
    tree.set_leaves(leaves)
    real_rand = torch.rand
    value = 0.0 if u == "zero" else float(np.nextafter(np.float32(1), np.float32(0)))

    def rand(k, *args, **kwargs):
        return torch.full((k,), value, dtype=kwargs.get("dtype", torch.float32))

    monkeypatch.setattr(torch, "rand", rand)
    index, values = tree.sample_np(256, torch.Generator().manual_seed(1))
    monkeypatch.setattr(torch, "rand", real_rand)
    assert (values > 0).all() and (leaves.numpy()[index] > 0).all()
    mass = np.full(256, value, dtype=np.float32) + np.arange(256, dtype=np.float32)
    mass *= np.float32(tree.total) / np.float32(256)  # as sample_np computes it
    assert np.array_equal(np.sort(index), np.sort(tree._find(mass)))
