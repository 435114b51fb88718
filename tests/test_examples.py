"""Smoke runs of the examples (tiny settings, in-process)."""

from __future__ import annotations

import importlib.util
import math
import runpy
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "1000 stored; sampled 32 rows with keys ['index', 'obs', 'reward']" in out
    assert "restored 1000 items, same content: True" in out
    assert "importance weights" in out


def test_offline_to_online_quick_run(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gymnasium", reason="the example needs the 'examples' extra")
    example = _load("offline_to_online")
    threads = torch.get_num_threads()
    results = example.main(["--quick", "--seed", "3"])
    assert torch.get_num_threads() == threads  # restored for the caller
    out = capsys.readouterr().out
    for line in (
        "eval return before offline pretraining",
        "eval return after offline pretraining",
        "eval return after online fine-tuning",
        "total time",
    ):
        assert line in out
    for key in ("random", "before_pretraining", "after_pretraining", "after_finetuning"):
        assert math.isfinite(results[key]) and results[key] >= 8  # CartPole's shortest episode
    stats = results["stats"]
    assert stats["offline_size"] == 2000
    assert stats["batches_sampled"] == 300
    assert stats["offline_fraction"] == pytest.approx(0.25)
    assert 0 < stats["online_size"] == stats["write_count"] <= results["env_steps"]
    assert stats["size"] == stats["offline_size"] + stats["online_size"]


def test_offline_to_online_hdf5_and_in_memory_layouts_agree(tmp_path: Path) -> None:
    pytest.importorskip("gymnasium", reason="the example needs the 'examples' extra")
    pytest.importorskip("h5py")
    example = _load("offline_to_online")
    arrays, _ = example.collect_offline(300, seed=0)
    from_file, how = example.load_offline(arrays, str(tmp_path))
    assert "read back" in how
    in_memory = example.to_ted(arrays)
    assert set(from_file.keys(True, True)) == set(in_memory.keys(True, True))
    for key in in_memory.keys(True, True):
        assert from_file[key].dtype == in_memory[key].dtype, key
        assert torch.equal(from_file[key], in_memory[key]), key
    assert bool(in_memory["next", "done"].any())  # episodes end within 300 steps
