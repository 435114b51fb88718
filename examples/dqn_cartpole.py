"""DQN on gymnasium's CartPole-v1, trained with ``lightning.Trainer.fit`` from an rbdata buffer.

The LightningModule collects environment steps with its live (epsilon-greedy)
Q-network inside ``training_step``, stamps them with the policy version the
ReplayCallback publishes, and writes them to a prioritized buffer served by a
ReplayDataModule. The callback feeds the step's TD errors back as priorities
(skipping slots rewritten since they were sampled) and keeps the buffer's
PolicyAgeFilter in step with the learner.

    python examples/dqn_cartpole.py                # until the greedy return target, or time
    python examples/dqn_cartpole.py --steps 200    # a short smoke run

Every epoch (500 steps) ends with a greedy evaluation; training stops once it
averages ``--stop-at-return``. The script then prints the average return of the
greedy policy over 20 fresh episodes (a random policy averages about 22).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.loggers import CSVLogger
from tensordict import TensorDict
from torch import nn

from rbdata import (
    LazyTensorStorage,
    PolicyAgeFilter,
    PolicyVersion,
    TensorDictPrioritizedReplayBuffer,
    TensorDictRoundRobinWriter,
)
from rbdata.lightning import ReplayCallback, ReplayDataModule


class Collector:
    """Steps one environment with a policy and returns TED-layout transitions."""

    def __init__(self, env: gym.Env, version: PolicyVersion, seed: int) -> None:
        self.env = env
        self.version = version
        self.obs, _ = env.reset(seed=seed)
        self.episode_return = 0.0
        self.returns: deque[float] = deque(maxlen=20)
        self.episodes = 0

    def collect(self, n: int, act: Callable[[torch.Tensor], int]) -> TensorDict:
        rows = []
        for _ in range(n):
            obs = torch.as_tensor(self.obs, dtype=torch.float32)
            action = act(obs)
            next_obs, reward, terminated, truncated, _ = self.env.step(action)
            rows.append((obs, action, next_obs, reward, terminated, truncated))
            self.episode_return += reward
            if terminated or truncated:
                self.returns.append(self.episode_return)
                self.episodes += 1
                self.episode_return = 0.0
                next_obs, _ = self.env.reset()
            self.obs = next_obs
        obs, action, next_obs, reward, terminated, truncated = zip(*rows, strict=True)
        term = torch.tensor(terminated).unsqueeze(-1)
        trunc = torch.tensor(truncated).unsqueeze(-1)
        return TensorDict(
            {
                "observation": torch.stack(obs),
                "action": torch.tensor(action),
                "policy_version": torch.full((n,), self.version(), dtype=torch.int64),
                "next": {
                    "observation": torch.as_tensor(np.stack(next_obs), dtype=torch.float32),
                    "reward": torch.tensor(reward, dtype=torch.float32).unsqueeze(-1),
                    "terminated": term,
                    "truncated": trunc,
                    "done": term | trunc,
                },
            },
            batch_size=[n],
        )


class DQN(L.LightningModule):
    """Double DQN with a soft-updated target network, Huber loss and importance weights."""

    def __init__(
        self,
        collector: Collector,
        *,
        hidden: int = 128,
        lr: float = 1e-3,
        gamma: float = 0.99,
        tau: float = 0.01,
        env_steps_per_update: int = 2,
        collect_every: int = 4,
        warmup_steps: int = 1000,
        eps_decay_steps: int = 6000,
        eval_episodes: int = 10,
    ) -> None:
        super().__init__()
        self.q = nn.Sequential(
            nn.Linear(4, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 2),
        )
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.collector = collector
        self.lr, self.gamma, self.tau = lr, gamma, tau
        self.env_steps_per_update, self.collect_every = env_steps_per_update, collect_every
        self.warmup_steps, self.eps_decay_steps = warmup_steps, eps_decay_steps
        self.eval_episodes = eval_episodes
        self.env_steps = 0

    def epsilon(self) -> float:
        return max(0.05, 1.0 - 0.95 * self.env_steps / self.eps_decay_steps)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> int:
        if torch.rand(()) < self.epsilon():
            return int(torch.randint(2, ()))
        return int(self.q(obs).argmax())

    def on_fit_start(self) -> None:
        if self.env_steps == 0:  # learning starts after random warm-up steps
            data = self.collector.collect(self.warmup_steps, lambda _: int(torch.randint(2, ())))
            self.trainer.datamodule.buffer.extend(data)

    def training_step(self, batch: TensorDict, batch_idx: int) -> dict[str, torch.Tensor]:
        if batch_idx % self.collect_every == 0:  # a few env steps at once: fewer, larger writes
            n = self.collect_every * self.env_steps_per_update
            self.trainer.datamodule.buffer.extend(self.collector.collect(n, self.act))
            self.env_steps += n

        q = self.q(batch["observation"]).gather(-1, batch["action"].unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_obs = batch["next", "observation"]
            best = self.q(next_obs).argmax(-1, keepdim=True)
            next_q = self.target(next_obs).gather(-1, best).squeeze(-1)
            not_done = (~batch["next", "terminated"].squeeze(-1)).float()
            target = batch["next", "reward"].squeeze(-1) + self.gamma * not_done * next_q
        weight = batch["priority_weight"].float()
        loss = (weight * nn.functional.smooth_l1_loss(q, target, reduction="none")).mean()
        self.log("loss", loss, prog_bar=True, batch_size=q.shape[0])
        return {"loss": loss, "td_error": (q - target).detach().abs()}

    def on_train_batch_end(self, outputs: dict, batch: TensorDict, batch_idx: int) -> None:
        with torch.no_grad():
            for p, tp in zip(self.q.parameters(), self.target.parameters(), strict=True):
                tp.lerp_(p, self.tau)

    def on_train_epoch_end(self) -> None:
        score = evaluate(self.q, self.eval_episodes, seed=self.current_epoch * 100)
        self.log("eval_return", score, batch_size=1)
        recent = list(self.collector.returns)[-10:]
        print(
            f"step {self.global_step:6d}  episodes {self.collector.episodes:4d}  "
            f"train return {statistics.fmean(recent) if recent else 0:6.1f}  "
            f"greedy return {score:6.1f}  epsilon {self.epsilon():.2f}",
            flush=True,
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.q.parameters(), lr=self.lr)


def evaluate(q: nn.Module, episodes: int, seed: int) -> float:
    """Average return of the greedy policy over ``episodes`` episodes."""
    env = gym.make("CartPole-v1")
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                action = int(q(torch.as_tensor(obs, dtype=torch.float32)).argmax())
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    return statistics.fmean(returns)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000, help="max gradient steps")
    parser.add_argument("--max-minutes", type=float, default=4.5, help="training time budget")
    parser.add_argument(
        "--stop-at-return",
        type=float,
        default=300.0,
        help="stop once an epoch's greedy evaluation averages this",
    )
    parser.add_argument("--steps-per-epoch", type=int, default=500)
    parser.add_argument("--eval-episodes", type=int, default=20, help="final evaluation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs/dqn_cartpole"),
        help="where Lightning's CSV log goes (metrics.csv; runs/ is git-ignored)",
    )
    return parser.parse_args(argv)


def train(args: argparse.Namespace) -> tuple[L.Trainer, DQN, ReplayDataModule]:
    torch.set_num_threads(1)
    L.seed_everything(args.seed, verbose=False)
    callback = ReplayCallback(priority_key="td_error")  # version: trainer.global_step
    collector = Collector(gym.make("CartPole-v1"), callback.version, seed=args.seed)
    model = DQN(collector)
    datamodule = ReplayDataModule(
        lambda: TensorDictPrioritizedReplayBuffer(
            alpha=0.6,
            beta=0.4,
            storage=LazyTensorStorage(50_000),
            writer=TensorDictRoundRobinWriter(track_generations=True),
            # Driven by the version the callback publishes, although built with an int.
            transform=PolicyAgeFilter(0, max_policy_lag=20_000),
        ),
        batch_size=128,
        batches_per_epoch=args.steps_per_epoch,
        seed=args.seed,
    )
    stop = EarlyStopping(
        "eval_return",
        mode="max",
        stopping_threshold=args.stop_at_return,
        patience=10**9,
        check_on_train_epoch_end=True,
    )
    trainer = L.Trainer(
        max_steps=args.steps,
        max_time={"minutes": args.max_minutes},
        callbacks=[callback, stop],
        gradient_clip_val=10.0,
        accelerator="cpu",
        # every metric (loss, eval_return, the callback's replay/... stats) in metrics.csv;
        # the progress bar shows the loss and replay/size
        logger=CSVLogger(args.out, name="lightning_logs"),
        log_every_n_steps=min(50, args.steps_per_epoch),
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=datamodule)
    return trainer, model, datamodule


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    start = time.monotonic()
    trainer, model, _ = train(args)
    train_s = time.monotonic() - start
    avg = evaluate(model.q, args.eval_episodes, seed=10_000 + args.seed)
    print(
        f"steps={trainer.global_step} env_steps={model.env_steps} "
        f"episodes={model.collector.episodes} train_time={train_s:.0f}s "
        f"greedy_return_avg={avg:.1f} over {args.eval_episodes} episodes "
        f"(total {time.monotonic() - start:.0f}s; a random policy averages ~22)"
    )
    return avg


if __name__ == "__main__":
    main()
