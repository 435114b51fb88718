"""Steps 2 and 3 of offline_to_online.py under ``lightning.Trainer.fit``.

Loaded by ``offline_to_online.py --trainer lightning``; the agent, the
collector and what happens after each update are that script's, so both
trainers do the same run. Pretraining: a ``ReplayDataModule`` over the offline
buffer. Fine-tuning: a ``ReplayDataModule`` over the
``OfflineToOnlineReplayBuffer`` whose ``samples_per_insert`` makes the learner
wait for the collector, a ``ReplayCallback`` publishing the collector's
``PolicyVersion`` to the buffer, and the collector thread started when
training starts (it waits on the data loader's rate limiter when it runs
ahead of the learner).

Lightning's progress bar shows the loss and the buffer's size; a ``CSVLogger``
writes every metric (the loss, the batches' offline share and the
``ReplayCallback``'s ``replay/...`` buffer stats) to
``<--out>/lightning_logs/<phase>/metrics.csv``, beside the example's own
learning curve, and ``learning_curve.plot_lightning_log`` draws the
fine-tuning log as ``lightning_finetune.png``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from learning_curve import plot_lightning_log
from lightning.pytorch.loggers import CSVLogger

from rbdata import OfflineToOnlineReplayBuffer, PolicyVersion, TensorDictReplayBuffer
from rbdata.lightning import ReplayCallback, ReplayDataModule


class DQNModule(L.LightningModule):
    """Runs the agent's own update (manual optimization) and then ``after_step``."""

    def __init__(self, agent: Any, after_step: Callable[[int, Any, float], None]) -> None:
        super().__init__()
        self.agent, self.after_step = agent, after_step
        self.q, self.target = agent.q, agent.target  # registered: Lightning sees the weights
        self.automatic_optimization = False

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.agent.optim

    def training_step(self, batch: Any, batch_idx: int) -> None:
        loss = self.agent.update(batch, self.optimizers(), self.manual_backward)
        self.log("loss", loss, prog_bar=True, batch_size=batch.batch_size[0])
        if "is_offline" in batch.keys():
            share = batch["is_offline"].float().mean()
            self.log("offline_share", share, prog_bar=True, batch_size=batch.batch_size[0])
        self.after_step(batch_idx + 1, batch, loss)


class CollectorModule(DQNModule):
    """Also starts the collector with training and stops it when training ends."""

    def __init__(self, agent: Any, start_collector: Callable[[Any], Any]) -> None:
        super().__init__(agent, after_step=lambda i, batch, loss: None)
        self.start_collector, self.collector = start_collector, None

    def on_train_start(self) -> None:
        limiter = self.trainer.train_dataloader.dataset.rate_limiter
        self.collector, self.after_step = self.start_collector(limiter)

    def on_train_end(self) -> None:
        stop(self.collector)


def trainer(
    max_steps: int, args: argparse.Namespace, phase: str, callbacks: list[Any] = ()
) -> L.Trainer:
    """A CPU Trainer with Lightning's progress bar and a CSVLogger writing into ``args.out``."""
    return L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        max_steps=max_steps,
        logger=CSVLogger(args.out, name="lightning_logs", version=phase),
        log_every_n_steps=max(1, min(50, max_steps // 10)),
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
    )


def pretrain(
    agent: Any,
    offline: TensorDictReplayBuffer,
    args: argparse.Namespace,
    after_step: Callable[[int, Any, float], None],
) -> None:
    """Step 2: ``Trainer.fit`` over a ReplayDataModule of the offline buffer."""
    dm = ReplayDataModule(
        offline,
        batch_size=args.batch_size,
        batches_per_epoch=args.pretrain_updates,
        prefetch=2,
        checkpoint_buffer=False,
        seed=args.seed,
    )
    trainer(args.pretrain_updates, args, "pretrain").fit(
        DQNModule(agent, after_step), datamodule=dm
    )


def finetune(
    agent: Any,
    rb: OfflineToOnlineReplayBuffer,
    args: argparse.Namespace,
    make_collector: Callable[..., Any],
    make_steps: Callable[[Any], Callable[[int, Any, float], None]],
) -> Any:
    """Step 3: ``Trainer.fit`` over the mixture while the collector feeds its online part."""
    started: list[Any] = []
    version = PolicyVersion()  # moved on by the learner, stamped by the collector

    def start_collector(limiter: Any) -> tuple[Any, Callable[[int, Any, float], None]]:
        collector = make_collector(rb, agent, limiter, version, args)
        collector.start()
        started.append(collector)
        return collector, make_steps(collector)

    callback = ReplayCallback(priority_key=None, policy_version=version)  # logs replay/...
    dm = ReplayDataModule(
        rb,
        batch_size=args.batch_size,
        batches_per_epoch=args.online_updates,
        prefetch=1,
        samples_per_insert=args.batch_size * args.updates_per_step,
        timeout=30,  # an epoch ends early if no data comes for 30 s (the collector died)
        checkpoint_buffer=False,
        seed=args.seed,
    )
    fit = trainer(args.online_updates, args, "finetune", [callback])
    try:
        fit.fit(CollectorModule(agent, start_collector), datamodule=dm)
    finally:
        for collector in started:
            stop(collector)
    assert fit.logger is not None and fit.logger.log_dir is not None
    plot_lightning_log(
        f"{fit.logger.log_dir}/metrics.csv",
        args.out / "lightning_finetune.png",
        "offline-to-online fine-tuning under Lightning (CSVLogger's metrics.csv)",
    )
    return started[0]


def stop(collector: Any) -> None:
    """Stop the collector thread and wait for it."""
    if collector is not None and collector.is_alive():
        collector.stop.set()
        collector.join()
