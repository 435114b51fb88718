"""Collectors and a learner on Ray, sharing one prioritized rbdata buffer.

N collector actors each run gymnasium's CartPole-v1 with the latest policy
weights the learner published, stamp every transition with that policy
version, and extend the shared buffer through its picklable client. One
learner trains a DQN with ``lightning.Trainer.fit`` on batches sampled from
the same buffer (a ``ReplayDataModule`` with requests in flight); its
``ReplayCallback`` feeds TD errors back as priorities. The buffer lives in a
Ray actor (``service_backend="ray"``).

    python examples/ray_collectors.py                    # 2 collectors, 600 learner steps
    python examples/ray_collectors.py --collectors 4 --steps 2000

It prints the throughput of each side: environment frames per second written
by the collectors, and batches (and transitions) per second the learner
trained on.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import gymnasium as gym
import lightning as L
import ray
import torch
from tensordict import TensorDict
from torch import nn

from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from rbdata.lightning import ReplayCallback, ReplayDataModule


def q_network() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))


@ray.remote(num_cpus=0)
class PolicyStore:
    """The latest policy weights and their version, published by the learner."""

    def __init__(self) -> None:
        self.version, self.weights = 0, None

    def publish(self, version: int, weights: dict[str, torch.Tensor]) -> None:
        self.version, self.weights = version, weights

    def latest(self, known: int) -> tuple[int, dict[str, torch.Tensor] | None]:
        """The version and, when newer than ``known``, the weights."""
        return self.version, (self.weights if self.version != known else None)


@ray.remote(num_cpus=0)
class CollectorActor:
    """Steps CartPole with the latest published policy and extends the shared buffer."""

    def __init__(self, buffer: Any, store: Any, seed: int, epsilon: float = 0.1) -> None:
        torch.set_num_threads(1)
        self.buffer, self.store, self.epsilon = buffer, store, epsilon
        self.env = gym.make("CartPole-v1")
        self.obs, _ = self.env.reset(seed=seed)
        self.generator = torch.Generator().manual_seed(seed)
        self.policy, self.version = q_network(), -1
        self.frames = 0

    def _refresh(self) -> None:
        version, weights = ray.get(self.store.latest.remote(self.version))
        if weights is not None:
            self.policy.load_state_dict(weights)
        self.version = version

    def _act(self, obs: torch.Tensor) -> int:
        if torch.rand((), generator=self.generator) < self.epsilon:
            return int(torch.randint(2, (), generator=self.generator))
        with torch.no_grad():
            return int(self.policy(obs).argmax())

    def run(self, seconds: float, frames_per_batch: int) -> int:
        """Collect for ``seconds``; return the frames written."""
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            self._refresh()
            self.buffer.extend(self._collect(frames_per_batch))
            self.frames += frames_per_batch
        return self.frames

    def _collect(self, n: int) -> TensorDict:
        obs, actions, rewards, next_obs, dones = [], [], [], [], []
        for _ in range(n):
            o = torch.as_tensor(self.obs, dtype=torch.float32)
            action = self._act(o)
            nxt, reward, terminated, truncated, _ = self.env.step(action)
            obs.append(o)
            actions.append(action)
            rewards.append(float(reward))
            next_obs.append(torch.as_tensor(nxt, dtype=torch.float32))
            dones.append(bool(terminated))
            self.obs = nxt if not (terminated or truncated) else self.env.reset()[0]
        return TensorDict(
            {
                "observation": torch.stack(obs),
                "action": torch.tensor(actions),
                "policy_version": torch.full((n,), self.version),
                "next": {
                    "observation": torch.stack(next_obs),
                    "reward": torch.tensor(rewards),
                    "terminated": torch.tensor(dones),
                },
            },
            batch_size=[n],
        )


class DQN(L.LightningModule):
    """A DQN learner; publishes its weights to the collectors every ``publish_every`` steps."""

    def __init__(self, store: Any, publish_every: int = 20, gamma: float = 0.99) -> None:
        super().__init__()
        self.q, self.target = q_network(), q_network()
        self.target.load_state_dict(self.q.state_dict())
        self.store, self.publish_every, self.gamma = store, publish_every, gamma
        self.policy_version = 0

    def training_step(self, batch: TensorDict, batch_idx: int) -> dict[str, torch.Tensor]:
        q = self.q(batch["observation"]).gather(1, batch["action"].unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            best = self.target(batch["next", "observation"]).max(-1).values
            target = batch["next", "reward"] + self.gamma * best * (~batch["next", "terminated"])
        td_error = q - target
        loss = (batch["priority_weight"] * td_error.pow(2)).mean()
        if (self.global_step + 1) % self.publish_every == 0:
            self.policy_version = self.global_step + 1
            self.target.load_state_dict(self.q.state_dict())
            weights = {k: v.detach().clone() for k, v in self.q.state_dict().items()}
            self.store.publish.remote(self.policy_version, weights)
        return {"loss": loss, "td_error": td_error.detach().abs()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.q.parameters(), lr=1e-3)


class Throughput(L.Callback):
    """Times the learner from its first batch on (after ``learning_starts``), and the writes."""

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer
        self.start: tuple[float, int] | None = None
        self.steps = 0

    def on_train_batch_start(self, *args: Any) -> None:
        if self.start is None:
            self.start = (time.monotonic(), self.buffer.write_count)

    def on_train_batch_end(self, *args: Any) -> None:
        self.steps += 1

    def rates(self) -> tuple[float, float]:
        """Learner steps per second and frames written per second, since the first batch."""
        assert self.start is not None, "the learner trained on no batch"
        seconds = time.monotonic() - self.start[0]
        return (self.steps - 1) / seconds, (self.buffer.write_count - self.start[1]) / seconds


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectors", type=int, default=2)
    parser.add_argument("--steps", type=int, default=600, help="learner steps")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--frames-per-batch", type=int, default=64)
    parser.add_argument("--learning-starts", type=int, default=500)
    args = parser.parse_args(argv)

    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(include_dashboard=False, log_to_driver=False)
    buffer = TensorDictPrioritizedReplayBuffer(
        alpha=0.6,
        beta=0.4,
        storage=LazyTensorStorage(100_000),
        batch_size=args.batch_size,
        prefetch=2,
        service_backend="ray",
        service_backend_options={"remote_config": {"num_cpus": 0}},
    )
    store = PolicyStore.remote()
    collectors = [
        CollectorActor.remote(buffer.client(), store, seed) for seed in range(args.collectors)
    ]
    # Collectors run a little longer than the learner needs; the learner waits for learning_starts.
    budget = 30.0 + 0.05 * args.steps
    runs = [c.run.remote(budget, args.frames_per_batch) for c in collectors]
    datamodule = ReplayDataModule(
        buffer, batches_per_epoch=args.steps, prefetch=2, min_size=args.learning_starts
    )
    throughput = Throughput(buffer)
    trainer = L.Trainer(
        max_steps=args.steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ReplayCallback(priority_key="td_error", log_stats=False), throughput],
    )
    model = DQN(store)
    trainer.fit(model, datamodule=datamodule)
    steps_per_s, frames_per_s = throughput.rates()
    for collector in collectors:
        ray.kill(collector)
    del runs
    stats = {
        "collector_frames_per_s": frames_per_s,
        "learner_steps_per_s": steps_per_s,
        "learner_samples_per_s": steps_per_s * args.batch_size,
        "buffer_size": float(len(buffer)),
        "policy_version": float(model.policy_version),
    }
    print(
        f"{args.collectors} collectors: {stats['collector_frames_per_s']:,.0f} frames/s written; "
        f"learner: {stats['learner_steps_per_s']:,.1f} steps/s "
        f"({stats['learner_samples_per_s']:,.0f} transitions/s); "
        f"buffer holds {len(buffer):,} transitions, policy version {model.policy_version}"
    )
    buffer.shutdown()
    if started_ray:
        ray.shutdown()
    return stats


if __name__ == "__main__":
    main()
