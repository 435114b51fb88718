"""Under DDP without Ray, each rank's own buffer is saved with the checkpoint and restored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from tensordict import TensorDict

from rbdata import LazyTensorStorage, TensorDictReplayBuffer
from rbdata.lightning import ReplayDataModule


def rank_buffer() -> TensorDictReplayBuffer:
    """Each rank fills its own buffer with ids that tell the ranks apart."""
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(64), batch_size=4)
    ids = torch.arange(16) + 1000 * rank
    rb.extend(TensorDict({"id": ids, "x": ids.float().unsqueeze(-1)}, [16]))
    return rb


class Learner(L.LightningModule):
    def __init__(self, out_dir: str, write_more: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.out_dir = out_dir
        self.write_more = write_more

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.write_more and batch_idx == 0:  # after the checkpoint's content is known
            buffer = self.trainer.datamodule.buffer
            ids = torch.arange(4) + 1000 * self.global_rank + 500
            buffer.extend(TensorDict({"id": ids, "x": ids.float().unsqueeze(-1)}, [4]))
        return self.layer(batch["x"]).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def on_train_start(self) -> None:
        buffer = self.trainer.datamodule.buffer
        report = {"ids": sorted(buffer[:]["id"].tolist())}
        name = f"start{int(self.write_more)}_rank{self.global_rank}.json"
        (Path(self.out_dir) / name).write_text(json.dumps(report))


def fit(root: Path, max_steps: int, write_more: bool, ckpt_path: Any = None) -> None:
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        max_steps=max_steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=2)],
    )
    datamodule = ReplayDataModule(rank_buffer, batches_per_epoch=4, seed=0)
    trainer.fit(Learner(str(root), write_more), datamodule=datamodule, ckpt_path=ckpt_path)


def test_each_rank_resumes_with_its_own_buffer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MASTER_PORT", raising=False)
    fit(tmp_path, max_steps=2, write_more=True)  # each rank adds 4 items, then checkpoints
    checkpoint = next((tmp_path / "ckpt").glob("*.ckpt"))
    dumps = [p for p in (tmp_path / "ckpt").iterdir() if ".buffer-" in p.name]
    assert len(dumps) == 1 and sorted(p.name for p in dumps[0].iterdir()) == ["rank0", "rank1"]
    assert not any((tmp_path / ".rbdata-rank-buffers").iterdir())  # staging moved away
    fit(tmp_path, max_steps=4, write_more=False, ckpt_path=checkpoint)
    for rank in (0, 1):
        ids = json.loads((tmp_path / f"start0_rank{rank}.json").read_text())["ids"]
        base = list(range(1000 * rank, 1000 * rank + 16))
        assert ids == base + [1000 * rank + 500 + i for i in range(4)]  # its own, not rank 0's
