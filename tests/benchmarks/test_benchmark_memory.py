"""The writers rows of benchmarks/bench_memory.py write what they count, at a tiny size."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TOTAL = 2_000  # Atari rows in all, 10 per extend


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        module = importlib.import_module("bench_memory")
        saved = dict(module.WRITES)
        module.WRITES["atari"] = (TOTAL, 10)
        yield module
    finally:
        module.WRITES.clear()
        module.WRITES.update(saved)
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("wrapped", [False, True], ids=["first", "wrapped"])
def test_rbdata_writers_write_the_total_once_and_wrapped_overwrites_a_full_buffer(bench, wrapped):
    result = bench.child_writers("rbdata", "atari", 2, -1.0, wrapped)
    assert result["exact"], result
    assert result["items"] == TOTAL
    # wrapped: the parent filled the buffer once, the writers wrote TOTAL more over it
    filled = TOTAL if wrapped else 0
    assert filled + TOTAL <= result["write_count"] < filled + TOTAL + 2 * 10
    assert result["rate"] > 0


@pytest.mark.parametrize("wrapped", [False, True], ids=["first", "wrapped"])
def test_limit_writers_each_fill_their_own_region(bench, wrapped):
    result = bench.child_limit_writers("atari", 2, -1.0, wrapped)
    assert result["exact"], result  # every written row holds its writer's mark
    assert result["rate"] > 0
