"""Smoke runs of the examples (tiny settings, in-process)."""

from __future__ import annotations

import csv
import importlib.util
import math
import runpy
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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


@pytest.mark.parametrize("trainer", ["plain", "lightning"])
def test_offline_to_online_quick_run(
    trainer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("gymnasium", reason="the example needs the 'examples' extra")
    if trainer == "lightning":
        pytest.importorskip("lightning")
    example = _load("offline_to_online")
    threads = torch.get_num_threads()
    argv = ["--quick", "--seed", "3", "--trainer", trainer, "--out", str(tmp_path)]
    results = example.main(argv)
    assert torch.get_num_threads() == threads  # restored for the caller
    out = capsys.readouterr().out
    for line in (
        "eval return before offline pretraining",
        "eval return after offline pretraining",
        "eval return after online fine-tuning",
        "total time",
        f"({trainer} trainer)",
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

    with open(tmp_path / f"curve_{trainer}.csv") as f:
        curve = list(csv.DictReader(f))
    updates = [int(row["update"]) for row in curve]
    assert updates == sorted(updates) and updates[0] == 0 and updates[-1] <= 500
    offline = [row for row in curve if row["phase"] == "offline"]
    online = [row for row in curve if row["phase"] == "online"]
    assert len(offline) == 5 and len(online) == 8  # 4 points per pretraining, 8 online
    assert all(float(row["offline_share"]) == 1.0 for row in offline)
    shares = [float(row["offline_share"]) for row in online]
    assert all(0.2 < s < 0.55 for s in shares) and shares[-1] < shares[0]  # annealed
    assert all(float(row["eval_return"]) >= 8 for row in curve)
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / f"curve_{trainer}.png").read_bytes()[:4] == b"\x89PNG"
    if trainer == "lightning":  # Lightning's CSV log, beside the curve
        with open(tmp_path / "lightning_logs" / "finetune" / "metrics.csv") as f:
            logged = list(csv.DictReader(f))
        assert any(r.get("replay/size") for r in logged) and any(r.get("loss") for r in logged)
        assert (tmp_path / "lightning_logs" / "pretrain" / "metrics.csv").is_file()
        if importlib.util.find_spec("matplotlib"):
            assert (tmp_path / "lightning_finetune.png").read_bytes()[:4] == b"\x89PNG"


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
