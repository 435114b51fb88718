"""The plain-torch limits of benchmarks/run.py do the work they claim, at a tiny size."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

import rbdata

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("_common"), importlib.import_module("bench_stages")
    finally:
        sys.path.remove(str(BENCHMARKS))


def _unpack(common, packed, rows: torch.Tensor, example) -> dict:
    """The leaves held by packed byte ``rows``, read back with the layout of ``packed``."""
    out = {}
    for key, offset, width in zip(packed.keys, packed.offsets, packed.widths, strict=True):
        leaf = example.get(key)
        raw = rows[:, offset : offset + width].contiguous().view(leaf.dtype)
        out[key] = raw.reshape(rows.shape[0], *leaf.shape[1:])
    return out


@pytest.mark.parametrize("memmapped", [False, True])
def test_packed_limit_rows_hold_every_leaf_of_the_item(bench, tmp_path, memmapped):
    common, _ = bench
    data = common.transitions(10, obs=3)
    alloc = common.file_alloc(str(tmp_path)) if memmapped else common._zeros
    packed = common.PackedLimit(8, data[:1], 4, alloc=alloc)
    packed.extend(data)  # wraps around: items 8 and 9 land in rows 0 and 1
    index = torch.tensor([0, 1, 5, 7])
    packed.gather(index)
    expected = data[torch.tensor([8, 9, 5, 7])]
    got = _unpack(common, packed, packed.out.view(torch.uint8), data)
    for key in packed.keys:
        assert torch.equal(got[key], expected.get(key)), key
    if memmapped:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["limit-1.bin"]


def test_per_key_limit_over_files_gathers_the_written_rows(bench, tmp_path):
    common, _ = bench
    data = common.transitions(6, obs=2)
    lim = common.Limit(6, data[:1], 3, alloc=common.file_alloc(str(tmp_path)))
    lim.extend(data)
    lim.gather(torch.tensor([4, 0, 2]))
    for key in lim.keys:
        assert torch.equal(lim.outs[key], data.get(key)[torch.tensor([4, 0, 2])])
    assert len(list(tmp_path.iterdir())) == len(lim.keys)


def test_timeit_rounds_gives_one_median_per_function(bench):
    common, _ = bench
    calls = [0, 0, 0]

    def count(i: int):
        return lambda: calls.__setitem__(i, calls[i] + 1)

    times = common.timeit_rounds(count(0), count(1), count(2), min_time=0.03, repeats=3)
    assert len(times) == 3 and all(t > 0 for t in times)
    assert all(c > 3 for c in calls)


def test_sample_stages_add_up_to_the_whole_sample(bench):
    _, stages_module = bench
    stages = stages_module.sample_stages(rbdata, capacity=2_000, batch=16)
    assert [name for name, _, _ in stages] == [
        "packed gather (limit)",
        "draw (sampler)",
        "gather, views, TensorDict",
        "buffer (locks, info, transforms)",
    ]
    total = sum(cost for _, cost, _ in stages)
    assert total == pytest.approx(stages[-1][2])
    assert stages[0][1] > 0


def test_consume_limit_writes_the_free_slots_and_draws_each_once(bench):
    common, _ = bench
    data = common.transitions(10, obs=3)
    lim = common.ConsumeLimit(10, data[:1], 4)
    drawn: list[int] = []
    real_gather = lim.store.gather
    lim.store.gather = lambda idx: (drawn.extend(idx.tolist()), real_gather(idx))
    lim.cycle(data[:6])  # a run: slots 0..5
    assert sorted(drawn) == list(range(6)) and bool(lim.free.all())
    for key in lim.store.keys:
        assert torch.equal(lim.store.bufs[key][:6], data.get(key)[:6])
    lim.cycle(data[:6])  # ring order from the reuse position: 6..9, then 0, 1 (two slices)
    for key in lim.store.keys:
        assert torch.equal(lim.store.bufs[key][[6, 7, 8, 9, 0, 1]], data.get(key)[:6])
    lim.free[torch.tensor([3, 4, 7])] = False  # live slots are skipped: 2, 5, 6 then 8
    drawn.clear()
    lim.cycle(data[6:10])
    for key in lim.store.keys:
        assert torch.equal(lim.store.bufs[key][torch.tensor([2, 5, 6, 8])], data.get(key)[6:10])
    assert sorted(drawn) == [2, 3, 4, 5, 6, 7, 8]


def test_free_list_consume_limit_reuses_slots_in_the_order_they_were_freed(bench):
    common, _ = bench
    data = common.transitions(8, obs=3)
    lim = common.FreeListConsumeLimit(8, data[:1], 3)
    drawn: list[int] = []
    real_gather = lim.store.gather
    lim.store.gather = lambda idx: (drawn.extend(idx.tolist()), real_gather(idx))
    lim.cycle(data[:8])
    assert sorted(drawn) == list(range(8))
    lim.cycle(data[:5])  # the five slots freed first, in that order
    for key in lim.store.keys:
        assert torch.equal(lim.store.bufs[key][drawn[:5]], data.get(key)[:5])
    assert sorted(drawn[8:]) == sorted(drawn[:5])


@pytest.fixture(scope="module")
def sumtree_limit():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("_sumtree_limit")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_sum_tree_limit_draws_in_proportion_and_refreshes_its_sums(sumtree_limit):
    torch.manual_seed(0)
    tree = sumtree_limit.SumTreeLimit(1000, alpha=1.0, beta=1.0)
    priority = torch.zeros(1000)
    priority[[3, 500, 999]] = torch.tensor([1.0, 2.0, 5.0])
    tree.update(torch.arange(1000), priority)
    assert float(tree.sums[0][0]) == pytest.approx(8.0, rel=1e-5)
    index, weight = tree.sample(8000)
    counts = torch.bincount(index, minlength=1000)
    assert counts[[3, 500, 999]].tolist() == [1000, 2000, 5000]  # stratified: exact
    # (p / min) ** -beta, the minimum over every leaf: the zero ones hold (0 + 1e-8) ** alpha
    assert torch.allclose(weight[index == 999], torch.tensor((5.0 / 1e-8) ** -1.0))
    tree.update(torch.tensor([999]), torch.tensor([1.0]))
    assert float(tree.sums[0][0]) == pytest.approx(4.0, rel=1e-5)


def test_prioritized_consume_limit_draws_every_written_slot_once_by_priority(bench, sumtree_limit):
    common, _ = bench
    torch.manual_seed(0)
    data = common.transitions(40, obs=3)
    lim = sumtree_limit.PrioritizedConsumeLimit(50, data[:1], 8, alpha=0.7, beta=0.5)
    drawn: list[int] = []
    real_gather = lim.store.gather
    lim.store.gather = lambda idx: (drawn.extend(idx.tolist()), real_gather(idx))
    lim.cycle(data[:40])  # slots 0..39, drawn from the tree until it is empty
    assert sorted(drawn) == list(range(40)) and bool(lim.free.all())
    assert float(lim.tree.sums[0][0]) == 0.0
    drawn.clear()
    lim.cycle(data[:20])  # ring order from the reuse position: 40..49, then 0..9
    assert sorted(drawn) == [*range(10), *range(40, 50)]
    for key in lim.store.keys:
        assert torch.equal(lim.store.bufs[key][40:], data.get(key)[:10])
        assert torch.equal(lim.store.bufs[key][:10], data.get(key)[10:20])
