"""Two DDP ranks on one prioritized replay buffer, without Ray (``share_across_ranks=True``).

Run it as any Lightning DDP script (Lightning starts the second rank by
running this file again)::

    python examples/ddp_shared_buffer.py runs/ddp_shared

The factory runs once, on local rank 0; rank 1 maps the same buffer (no
copy). Each step the two ranks train on the two halves of one global batch
of ``2 * 16`` rows drawn from the one priority tree; rank 1's collector adds
rows that rank 0 samples too, and both ranks' new priorities reach the tree.
Each rank writes what it saw to ``<out>/rank<r>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from tensordict import TensorDict
from torch import nn

from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from rbdata.lightning import ReplayCallback, ReplayDataModule


def make_buffer() -> TensorDictPrioritizedReplayBuffer:
    """Runs on local rank 0 only; the data module shares it with the other ranks."""
    return TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10_000))


def transitions(n: int, first_id: int) -> TensorDict:
    """``n`` made-up transitions: an observation, a reward and an id telling them apart."""
    obs = torch.randn(n, 4)
    return TensorDict(
        {"id": torch.arange(n) + first_id, "observation": obs, "reward": obs.sum(-1)}, [n]
    )


class RewardModel(L.LightningModule):
    """Regresses the reward; its per-row errors become the rows' new priorities."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.out = out
        self.rows: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        buffer = self.trainer.datamodule.buffer  # this rank's side of the one buffer
        if self.global_rank == 1:  # a collector on rank 1: every rank samples its rows
            buffer.extend(transitions(8, 1000 + 8 * batch_idx))
        self.rows.append(batch.shape[0])
        err = self.net(batch["observation"]).squeeze(-1) - batch["reward"]
        loss = (batch["priority_weight"] * err.pow(2)).mean()
        return {"loss": loss, "td_error": err.detach().abs()}

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_train_end(self) -> None:
        self.trainer.strategy.barrier()  # every rank's rows and priorities are in
        buffer = self.trainer.datamodule.buffer
        report = {"rank": self.global_rank, "batch_rows": self.rows, "size": len(buffer)}
        report["collected"] = int((buffer.local[:]["id"] >= 1000).sum())
        Path(self.out, f"rank{self.global_rank}.json").write_text(json.dumps(report))


def main(out: str) -> None:
    """Train 4 steps on two CPU ranks (gloo) sharing one buffer."""
    Path(out).mkdir(parents=True, exist_ok=True)
    L.seed_everything(0, verbose=False)  # the one sampler's seed comes from it
    dm = ReplayDataModule(
        make_buffer,
        batch_size=16,  # per rank: a global batch of 16 * world_size
        batches_per_epoch=4,
        offline_data=transitions(256, 0),  # loaded once, by local rank 0
        share_across_ranks=True,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=4,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=out,
        callbacks=[ReplayCallback(priority_key="td_error")],
    )
    trainer.fit(RewardModel(out), datamodule=dm)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/ddp_shared")
