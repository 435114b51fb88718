"""DQN on gymnasium's CartPole-v1, trained with ``lightning.Trainer.fit`` from an rbdata buffer.

The LightningModule collects environment steps with its live (epsilon-greedy)
Q-network inside ``training_step``, stamps them with the policy version the
ReplayCallback publishes, and writes them to a prioritized buffer served by a
ReplayDataModule. The callback feeds the step's TD errors back as priorities
(skipping slots rewritten since they were sampled) and keeps the buffer's
PolicyAgeFilter in step with the learner.

    python examples/dqn_cartpole.py                    # until the return target or --max-minutes
    python examples/dqn_cartpole.py --steps 200        # a short smoke run

It prints the average return of the greedy policy over evaluation episodes
(a random policy averages about 22).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections import deque

import gymnasium as gym
import lightning as L
import torch
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

    def collect(self, n: int, act: callable) -> TensorDict:
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
        obs, action, next_obs, reward, terminated, truncated = zip(*rows)
        term = torch.tensor(terminated).unsqueeze(-1)
        trunc = torch.tensor(truncated).unsqueeze(-1)
        return TensorDict(
            {
                "observation": torch.stack(obs),
                "action": torch.tensor(action),
                "policy_version": torch.full((n,), self.version(), dtype=torch.int64),
                "next": {
                    "observation": torch.as_tensor(list(next_obs), dtype=torch.float32),
                    "reward": torch.tensor(reward, dtype=torch.float32).unsqueeze(-1),
                    "terminated": term,
                    "truncated": trunc,
                    "done": term | trunc,
                },
            },
            batch_size=[n],
        )


class DQN(L.LightningModule):
    """Double DQN with a target network, Huber loss and importance-sampling weights."""

    def __init__(
        self,
        collector: Collector,
        *,
        hidden: int = 128,
        lr: float = 1e-3,
        gamma: float = 0.99,
        target_every: int = 200,
        env_steps_per_update: int = 1,
        collect_every: int = 4,
        warmup_steps: int = 1000,
        eps_decay_steps: int = 10_000,
        stop_at_return: float = 200.0,
    ) -> None:
        super().__init__()
        self.q = nn.Sequential(
            nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2)
        )
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.collector = collector
        self.lr, self.gamma, self.target_every = lr, gamma, target_every
        self.env_steps_per_update = env_steps_per_update
        self.collect_every = collect_every
        self.warmup_steps, self.eps_decay_steps = warmup_steps, eps_decay_steps
        self.stop_at_return = stop_at_return
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
            buffer = self.trainer.datamodule.buffer
            buffer.extend(self.collector.collect(self.warmup_steps, lambda _: int(torch.randint(2, ()))))

    def training_step(self, batch: TensorDict, batch_idx: int) -> dict[str, torch.Tensor]:
        if batch_idx % self.collect_every == 0:  # collect a few steps at once: cheaper writes
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
        td_error = q - target
        weight = batch["_weight"].float()
        loss = (weight * nn.functional.smooth_l1_loss(q, target, reduction="none")).mean()
        if self.global_step % self.target_every == 0:
            self.target.load_state_dict(self.q.state_dict())
        if self.recent_return() >= self.stop_at_return:
            self.trainer.should_stop = True
        return {"loss": loss, "td_error": td_error.detach().abs()}

    def recent_return(self) -> float:
        """Average return of the last 10 training episodes (0 before there are 10)."""
        returns = list(self.collector.returns)[-10:]
        return statistics.fmean(returns) if len(returns) == 10 else 0.0

    def on_train_epoch_end(self) -> None:
        print(
            f"step {self.global_step:6d}  episodes {self.collector.episodes:4d}  "
            f"last-10 return {self.recent_return():6.1f}  epsilon {self.epsilon():.2f}",
            flush=True,
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.q.parameters(), lr=self.lr)


def evaluate(q: nn.Module, episodes: int, seed: int) -> float:
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


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000, help="max gradient steps")
    parser.add_argument("--max-minutes", type=float, default=5.0, help="wall-clock budget")
    parser.add_argument("--stop-at-return", type=float, default=200.0,
                        help="stop when the last 10 training episodes average this")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    L.seed_everything(args.seed, verbose=False)
    start = time.monotonic()
    callback = ReplayCallback(priority_key="td_error")  # version = trainer.global_step
    collector = Collector(gym.make("CartPole-v1"), callback.version, seed=args.seed)
    model = DQN(collector, warmup_steps=min(1000, 10 * args.steps), stop_at_return=args.stop_at_return)
    datamodule = ReplayDataModule(
        lambda: TensorDictPrioritizedReplayBuffer(
            alpha=0.6, beta=0.4,
            storage=LazyTensorStorage(50_000),
            writer=TensorDictRoundRobinWriter(track_generations=True),
            # PolicyAgeFilter gets the callback's published version, whatever int it starts from.
            transform=PolicyAgeFilter(0, max_policy_lag=50_000),
        ),
        batch_size=64, batches_per_epoch=1000, seed=args.seed,
    )
    trainer = L.Trainer(
        max_steps=args.steps,
        max_time={"minutes": args.max_minutes},
        callbacks=[callback],
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, datamodule=datamodule)
    train_s = time.monotonic() - start
    avg = evaluate(model.q, args.eval_episodes, seed=10_000 + args.seed)
    print(
        f"steps={trainer.global_step} env_steps={model.env_steps} episodes={collector.episodes} "
        f"train_time={train_s:.0f}s greedy_return_avg={avg:.1f} over {args.eval_episodes} episodes "
        f"(total {time.monotonic() - start:.0f}s)"
    )
    return avg


if __name__ == "__main__":
    main()
