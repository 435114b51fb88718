"""benchmarks/scale.py runs the same code as at 100M, at a tiny size."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def scale():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("scale")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_tiny_sizes_give_one_row_each_and_clean_up(scale, tmp_path, capsys):
    rows = scale.main(["--sizes", "3e2,2e3", "--dir", str(tmp_path), "--min-time", "0.03"])
    assert [row["size"] for row in rows] == [300, 2000]
    for row in rows:
        assert row["fill_rows_per_s"] > 0
        for name in ("uniform", "prioritized", "slice"):
            assert 0 < row[f"{name}_ms"] < 1000
        assert row["rss_anon_mb"] > 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0].split()[:2] == ["size", "fill"]
    assert lines[1].split()[0] == "300" and lines[2].split()[0] == "2,000"
    assert lines[3].split()[:4] == ["2,000", "vs", "300:", "uniform"] and "slice" in lines[3]
    assert list(tmp_path.iterdir()) == []  # the memory-mapped data is deleted


def test_the_samplers_see_the_whole_filled_storage(scale, tmp_path):
    """The three buffers share one storage: each sampler draws from every filled slot."""
    import rbdata

    storage = rbdata.LazyMemmapStorage(1000, scratch_dir=tmp_path)
    rb = rbdata.ReplayBuffer(storage=storage)
    scale.fill(rb, 1000)
    sampler = rbdata.PrioritizedSampler(1000, alpha=1.0, beta=0.0)
    scale.attach(sampler, 1000)
    index, _ = sampler.sample(storage, 5000)
    assert index.unique().numel() > 900
    chunk = scale.small_transitions(500)
    assert int(chunk["next", "done"].sum()) == 2


def test_bad_sizes_are_refused(scale):
    with pytest.raises(SystemExit):
        scale.main(["--sizes", "100"])
    with pytest.raises(SystemExit):
        scale.main(["--sizes", "big"])
