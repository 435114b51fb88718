"""ReplayDataModule(share_across_ranks=True): one buffer for every DDP rank of a node.

Real DDP ranks on gloo: ``ddp_spawn`` in this process, ``ddp`` in a script
run as a user would (Lightning launches the other rank by running it again).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata.lightning import ReplayCallback, ReplayDataModule
from rbdata.sharing.liveness import alive

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = TensorDict({"id": torch.arange(32), "x": torch.arange(32.0).unsqueeze(-1)}, [32])


def prioritized_buffer() -> TensorDictPrioritizedReplayBuffer:
    """Built on local rank 0 only (the other ranks attach to it)."""
    return TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=0.5, storage=LazyTensorStorage(256), batch_size=4
    )


def _shm() -> set[str]:
    """rbdata's names in /dev/shm whose creator is gone (other processes may be running)."""
    names = set()
    for name in os.listdir("/dev/shm"):
        parts = name.split("-")
        ours = name.startswith("rbdata-") and len(parts) > 3
        named = ours and parts[1].isdigit() and parts[2].isdigit()
        if named and not alive(int(parts[1]), int(parts[2])):
            names.add(name)
    return names


class Learner(L.LightningModule):
    """Rank 1 writes rows at its first step and gives its rows priority 1000 (rank 0: 1)."""

    def __init__(self, out_dir: str, tag: str, write: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.out_dir, self.tag, self.write = out_dir, tag, write
        self.seen: list[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        buffer = self.trainer.datamodule.buffer
        if self.write and self.global_rank == 1 and not self.seen:
            ids = torch.arange(4) + 1000
            buffer.extend(TensorDict({"id": ids, "x": ids.float().unsqueeze(-1)}, [4]))
        self.seen.append(batch["index"].tolist())
        td = torch.full((batch.shape[0],), 1000.0 if self.global_rank == 1 else 1.0)
        return {"loss": self.layer(batch["x"]).sum(), "td_error": td}

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def _report(self, when: str) -> None:
        self.trainer.strategy.barrier(f"report-{when}")  # every rank's writes and updates are in
        buffer = self.trainer.datamodule.buffer
        report: dict[str, Any] = {
            "ids": sorted(buffer.local[:]["id"].tolist()),
            "seen": self.seen,
            "world": buffer.world_size,
        }
        if buffer.owner:
            report["total"] = buffer.local.sampler.priority_mass().total
        name = f"{self.tag}_{when}_rank{self.global_rank}.json"
        (Path(self.out_dir) / name).write_text(json.dumps(report))

    def on_train_start(self) -> None:
        self._report("start")

    def on_train_end(self) -> None:
        self._report("end")


def fit(root: Path, tag: str, devices: int, max_steps: int, write: bool, ckpt: Any = None) -> None:
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp_spawn" if devices > 1 else "auto",
        max_steps=max_steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[
            ReplayCallback(priority_key="td_error", log_stats=False),
            ModelCheckpoint(dirpath=root / tag, every_n_train_steps=2, save_top_k=-1),
        ],
    )
    dm = ReplayDataModule(
        prioritized_buffer,
        batch_size=4,
        batches_per_epoch=4,
        offline_data=OFFLINE,
        seed=0,
        share_across_ranks=True,
    )
    trainer.fit(Learner(str(root), tag, write), datamodule=dm, ckpt_path=ckpt)


def _report(root: Path, name: str) -> dict[str, Any]:
    return json.loads((root / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ddp_spawn run of 4 steps on two ranks, checkpointed every 2 steps."""
    os.environ.pop("MASTER_PORT", None)
    root = tmp_path_factory.mktemp("shared")
    before = _shm()
    fit(root, "two", devices=2, max_steps=4, write=True)
    assert _shm() <= before  # nothing left in /dev/shm
    return root


def test_ddp_spawn_ranks_share_one_buffer(two_ranks: Path):
    ranks = [_report(two_ranks, f"two_end_rank{r}") for r in (0, 1)]
    ids = list(range(32)) + [1000, 1001, 1002, 1003]
    assert ranks[0]["ids"] == ranks[1]["ids"] == ids  # rank 1's rows, seen by rank 0
    assert ranks[0]["total"] > 999  # rank 1's priorities reached the owner's tree
    assert len(ranks[0]["seen"]) == len(ranks[1]["seen"]) == 4
    for share0, share1 in zip(ranks[0]["seen"], ranks[1]["seen"], strict=True):
        assert len(share0) == len(share1) == 4  # two shares of a global batch of 8


def test_the_checkpoint_holds_the_buffer_once(two_ranks: Path):
    dumps = sorted(p for p in (two_ranks / "two").iterdir() if ".buffer-" in p.name)
    assert len(dumps) == 2  # one per checkpoint (steps 2 and 4), not one per rank
    assert not any(p.name.startswith("rank") for p in dumps[-1].iterdir())
    again = prioritized_buffer()
    again.loads(dumps[-1])
    assert sorted(again[:]["id"].tolist()) == list(range(32)) + [1000, 1001, 1002, 1003]


def test_resume_with_one_rank_then_two(two_ranks: Path):
    ids = list(range(32)) + [1000, 1001, 1002, 1003]
    ckpt = sorted((two_ranks / "two").glob("*step=2.ckpt"))[0]
    fit(two_ranks, "one", devices=1, max_steps=4, write=False, ckpt=ckpt)  # 2 -> 1
    start = _report(two_ranks, "one_start_rank0")
    assert start["world"] == 1 and start["ids"] == ids and start["total"] > 999
    assert len(_report(two_ranks, "one_end_rank0")["seen"]) == 2  # steps 3 and 4
    ckpt = sorted((two_ranks / "one").glob("*step=4.ckpt"))[0]
    fit(two_ranks, "back", devices=2, max_steps=6, write=False, ckpt=ckpt)  # 1 -> 2
    for rank in (0, 1):
        start = _report(two_ranks, f"back_start_rank{rank}")
        assert start["world"] == 2 and start["ids"] == ids
        assert len(_report(two_ranks, f"back_end_rank{rank}")["seen"]) == 2


def test_across_nodes_the_flag_points_to_ray():
    trainer = L.Trainer(accelerator="cpu", devices=1, num_nodes=2, strategy="ddp", logger=False)
    dm = ReplayDataModule(prioritized_buffer, batch_size=4, share_across_ranks=True)
    dm.trainer = trainer
    with pytest.raises(ValueError, match='service_backend="ray"'):
        dm.setup("fit")


_DDP_SCRIPT = """
import json, sys
from pathlib import Path

import lightning as L
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from rbdata.lightning import ReplayDataModule


def make_buffer():
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(64), sampler=SamplerWithoutReplacement(), batch_size=4
    )


class Learner(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        if batch_idx == 0 and self.global_rank == 1:  # a collector on rank 1
            ids = torch.arange(2) + 500
            self.trainer.datamodule.buffer.extend(
                TensorDict({"id": ids, "x": ids.float().unsqueeze(-1)}, [2])
            )
        self.seen.append(batch["index"].tolist())
        return self.layer(batch["x"]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def on_train_end(self):
        self.trainer.strategy.barrier()
        buffer = self.trainer.datamodule.buffer
        report = {"seen": self.seen, "len": len(buffer)}
        Path(sys.argv[1], f"rank{self.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    data = TensorDict({"id": torch.arange(16), "x": torch.arange(16.0).unsqueeze(-1)}, [16])
    dm = ReplayDataModule(make_buffer, batch_size=2, batches_per_epoch=3, offline_data=data,
                          seed=5, share_across_ranks=True)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=3, logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=sys.argv[1])
    trainer.fit(Learner(), datamodule=dm)
"""


def _run_two_ranks(script: Path, tmp_path: Path) -> list[dict]:
    """Run ``script tmp_path`` as a user launches a 2-rank DDP run; the ranks' JSON reports."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MASTER_PORT", None)
    env.pop("LOCAL_RANK", None)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_ddp_ranks_take_disjoint_shares_of_the_seeded_global_draws(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(_DDP_SCRIPT))
    before = _shm()
    ranks = _run_two_ranks(script, tmp_path)
    assert _shm() <= before
    assert ranks[0]["len"] == ranks[1]["len"] == 18  # rank 1's collector rows, on both ranks
    # the same seed in one process: the global draws of 4 rows the two shares make up
    reference = TensorDictReplayBuffer(
        storage=LazyTensorStorage(64), sampler=SamplerWithoutReplacement(), batch_size=4
    )
    reference.set_rng(torch.Generator().manual_seed(5))
    reference.extend(TensorDict({"id": torch.arange(16), "x": torch.zeros(16, 1)}, [16]))
    for step in range(3):
        share0, share1 = ranks[0]["seen"][step], ranks[1]["seen"][step]
        assert not set(share0) & set(share1)
        assert share0 + share1 == reference.draw(4).index.tolist()
        if step == 0:  # rank 1 wrote during step 0, before both ranks asked for draw 1
            ids = torch.arange(2) + 500
            reference.extend(TensorDict({"id": ids, "x": torch.zeros(2, 1)}, [2]))


def test_the_documented_example_runs_on_two_ddp_ranks(tmp_path: Path):
    """examples/ddp_shared_buffer.py, shown in docs/lightning.md, as a user runs it."""
    ranks = _run_two_ranks(ROOT / "examples" / "ddp_shared_buffer.py", tmp_path)
    assert ranks[0]["batch_rows"] == ranks[1]["batch_rows"] == [16] * 4
    assert ranks[0]["size"] == ranks[1]["size"] == 256 + 4 * 8  # one buffer
    assert ranks[0]["collected"] == 32  # rank 1's collector's rows, on rank 0
