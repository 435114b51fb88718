"""A smoke run of examples/dqn_cartpole.py (a few steps; the full run is documented there)."""

import csv
import importlib.util
from pathlib import Path

import torch

EXAMPLE = Path(__file__).parents[2] / "examples" / "dqn_cartpole.py"


def load_example():
    spec = importlib.util.spec_from_file_location("dqn_cartpole", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dqn_example_smoke_run(tmp_path):
    dqn = load_example()
    args = dqn.parse_args(
        ["--steps", "24", "--steps-per-epoch", "12", "--stop-at-return", "1e9", "--seed", "1"]
        + ["--out", str(tmp_path)]
    )
    trainer, model, datamodule = dqn.train(args)
    assert trainer.global_step == 24
    buffer = datamodule.buffer
    assert len(buffer) == model.warmup_steps + model.env_steps == 1000 + 48
    stamps = buffer[:]["policy_version"]  # in write order: the buffer has not wrapped
    assert bool((stamps[1:] >= stamps[:-1]).all())  # stamped with the live, growing version
    assert stamps[:1000].eq(0).all() and 0 < int(stamps[-1]) < 24
    assert buffer.stats()["write_count"] == 1048
    assert dqn.evaluate(model.q, 1, seed=0) >= 8
    assert torch.isfinite(next(model.q.parameters())).all()
    # the CSVLogger's log holds the callback's buffer stats and the loss
    (metrics,) = tmp_path.glob("lightning_logs/*/metrics.csv")
    with open(metrics) as f:
        rows = list(csv.DictReader(f))
    assert any(r.get("replay/size") for r in rows) and any(r.get("loss") for r in rows)
    assert any(r.get("eval_return") for r in rows)
