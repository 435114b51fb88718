"""benchmarks/gpu.py runs as a smoke test at a tiny size: on the CPU everywhere, on CUDA where
there is one."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    ),
]


@pytest.fixture(scope="module")
def gpu():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("gpu")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("device", DEVICES)
def test_tiny_run_prints_every_row_with_its_ratio(gpu, device, capsys):
    rows = gpu.main(["--device", device, "--tiny"])
    assert list(rows) == ["uniform", "per 20,000", "per 50,000", "loader"]
    for row in rows.values():
        assert row["lib"] > 0 and row["limit"] > 0
    assert [rows[name]["unit"] for name in rows] == ["GB/s", "ms/batch", "ms/batch", "steps/s"]
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith(f"device: {device}")
    assert [line.split()[0] for line in lines[2:]] == ["uniform", "per", "per", "loader"]
    for line in lines[2:]:
        assert float(line.split()[-1]) > 0  # the ratio column


def test_cuda_without_a_device_is_refused(gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        gpu.main(["--device", "cuda"])
