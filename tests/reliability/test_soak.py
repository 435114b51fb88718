"""Soak: collector, prefetching ReplayDataset and priority updates at once for a few seconds.

Runs ``benchmarks/soak.py``'s ``run_soak`` (which ``python benchmarks/soak.py
--seconds N`` runs for longer): no torn rows, every row in its slot, an exact
write count, bounded memory, no thread crashing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"
GENERATION = "generation does not match the row"


@pytest.fixture(scope="module")
def report() -> dict:
    spec = importlib.util.spec_from_file_location("rbdata_soak", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run_soak(3.0)


def test_no_torn_rows_exact_counts_bounded_memory(report):
    assert {k: v for k, v in report["failures"].items() if k != GENERATION} == {}
    assert report["batches"] > 50 and report["extends"] > 50 and report["priority_updates"] > 50
    assert report["rss_growth_mib"] < 256


@pytest.mark.xfail(
    strict=True,
    reason="sample() under a concurrent extend can return a row written after the draw "
    "with the generation drawn before it (index_generation older than the row)",
)
def test_a_sampled_row_carries_its_own_generation(report):
    assert GENERATION not in report["failures"]
