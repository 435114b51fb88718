"""benchmarks/plot.py: the ratios it draws from a benchmark run's JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

PLOT = Path(__file__).resolve().parents[2] / "benchmarks" / "plot.py"


def load_plot():
    spec = importlib.util.spec_from_file_location("_benchmark_plot", PLOT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUN = {
    "rows": {
        "sample": {"unit": "items/s", "lib": 80.0, "limit": 100.0},
        "per": {"unit": "steps/s", "lib": 30.0, "limit": 20.0, "limit_name": "cpprb"},
        "slice": {"error": "RuntimeError: out of memory"},
        "nolimit": {"unit": "steps/s", "lib": 5.0},
    },
    "torchrl": {"sample": {"lib": 40.0}},
    "loader": [
        {"name": "loader: raw: rb.sample() + step", "steps_per_s": 1000.0, "ratio": 1.0},
        {"name": "loader prefetch=2 (vs raw)", "steps_per_s": 900.0, "ratio": 0.9},
        {"name": "loader prefetch=2 vs raw, again", "steps_per_s": 900.0, "ratio": 0.9},
    ],
}


def test_ratios_divide_by_the_limit_and_skip_failed_rows():
    bars = load_plot().ratios(RUN)
    assert bars == [("sample", 0.8, 0.4), ("per (vs cpprb)", 1.5, None)]
    rows_only = load_plot().ratios(RUN["rows"])  # run.py --json's one line: no torchrl, loader
    assert rows_only == [("sample", 0.8, None), ("per (vs cpprb)", 1.5, None)]


def test_loader_rows_are_steps_per_second_once_each():
    steps = load_plot().loader_steps(RUN)
    assert steps == [("raw: rb.sample() + step", 1000.0), ("loader prefetch=2", 900.0)]
    assert load_plot().loader_steps(RUN["rows"]) == []


def test_main_writes_the_chart(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    (tmp_path / "run.json").write_text(json.dumps(RUN))
    load_plot().main([str(tmp_path / "run.json"), str(tmp_path / "out.png")])
    assert (tmp_path / "out.png").read_bytes()[:4] == b"\x89PNG"
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(ValueError, match="nothing to plot"):
        load_plot().plot({"rows": {"slice": {"error": "x"}}}, tmp_path / "none.png")
