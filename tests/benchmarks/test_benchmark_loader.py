"""benchmarks/bench_loader.py: the plain-torch prefetch limit, run at a tiny size."""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from rbdata import LazyTensorStorage, ReplayDataset, TensorDictReplayBuffer
from rbdata.loader import ReplayBatch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("bench_loader")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture
def rb(bench):
    common = importlib.import_module("_common")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(32), batch_size=4)
    common.fill(rb, 32, common.pixel_transitions, chunk=16)
    return rb


def _layout(batch):
    return [(key, batch[key].shape, batch[key].dtype) for key in batch]


def test_the_limit_yields_rbdata_batches(bench, rb):
    """Same type, keys, shapes and dtypes as ReplayDataset's batches; rows of the storage."""
    limit = bench.PrefetchLimit(rb.storage, rb.batch_size, num_batches=7, ahead=2)
    assert len(limit.ring) == 3  # the queue's bound (1) + 2
    with ReplayDataset(rb, num_batches=1, prefetch=2) as ds:
        (theirs,) = list(DataLoader(ds, batch_size=None))
    count = 0
    for batch in DataLoader(limit, batch_size=None):
        count += 1
        assert type(batch) is ReplayBatch and batch.batch_size == theirs.batch_size
        assert _layout(batch) == _layout(theirs)
        index = batch["index"]
        assert int(index.min()) >= 0 and int(index.max()) < len(rb)
        for key in rb.storage.leaf_keys():
            assert torch.equal(batch[key], rb.storage.get_leaf(key)[index])
    assert count == 7


def test_the_limit_loop_runs_beside_the_loader_loops(bench, rb):
    seen = []

    def step(batch):
        seen.append(_layout(batch))

    loops = bench._loops(rb, step, steps=3)
    loops["limit"]()
    loops["p2"]()
    assert len(seen) == 6 and seen[:3] == seen[3:]
    rows = bench._measure(
        loops, [("limit", "limit", None), ("p2 vs limit", "p2", "limit")], rounds=2, steps=3
    )
    assert [label for label, _, _ in rows] == ["limit", "p2 vs limit"]
    assert all(rate > 0 and ratio > 0 for _, rate, ratio in rows)


def test_a_loop_broken_early_stops_the_limit_thread(bench, rb):
    limit = bench.PrefetchLimit(rb.storage, rb.batch_size, num_batches=100, ahead=2)
    before = threading.active_count()
    iterator = iter(limit)
    next(iterator)
    iterator.close()  # what a `break` out of the loop does, once the generator is dropped
    assert threading.active_count() == before


def test_the_limit_needs_two_batches_ahead(bench, rb):
    with pytest.raises(ValueError, match="ahead must be >= 2"):
        bench.PrefetchLimit(rb.storage, rb.batch_size, num_batches=1, ahead=1)
