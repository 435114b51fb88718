"""A plain PyTorch training loop (no Lightning) over a ReplayDataset fed by a collector thread.

A collector thread plays gymnasium's CartPole-v1 with a snapshot of the
learner's Q-network (epsilon-greedy), stamps every transition with the policy
version that produced it and extends the buffer. The learner iterates
``DataLoader(ReplayDataset(...), batch_size=None)``:

- ``min_size`` holds the first batch until the collector has written enough;
- ``prefetch=2`` samples and gathers two batches ahead on a background thread;
- ``samples_per_insert`` keeps the learner from overfitting a small buffer
  (``SampleToInsertRatio``: the collector also waits when it runs ahead);
- a ``PolicyAgeFilter`` drops data from policies more than ``--max-lag``
  versions old, checked again when a prefetched batch is handed out;
- ``timeout`` ends the pass once the collector has stopped writing.

    python examples/dataloader_loop.py               # 20,000 environment steps
    python examples/dataloader_loop.py --frames 2000 # a short smoke run
"""

from __future__ import annotations

import argparse
import copy
import statistics
import threading
import time
from collections import deque

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import nn
from torch.utils.data import DataLoader

from rbdata import (
    LazyTensorStorage,
    PolicyAgeFilter,
    PolicyVersion,
    ReplayDataset,
    TensorDictReplayBuffer,
)
from rbdata.loader import SampleToInsertRatio


def q_network(hidden: int = 128) -> nn.Module:
    return nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))


class Collector(threading.Thread):
    """Plays CartPole with the latest policy snapshot and writes transitions to the buffer."""

    def __init__(
        self,
        rb: TensorDictReplayBuffer,
        limiter: SampleToInsertRatio,
        version: PolicyVersion,
        frames: int,
        chunk: int = 32,
    ) -> None:
        super().__init__(name="collector", daemon=True)
        self.rb, self.limiter, self.version = rb, limiter, version
        self.frames, self.chunk = frames, chunk
        self.policy = q_network()
        self.policy_lock = threading.Lock()
        self.returns: deque[float] = deque(maxlen=20)
        self.written = 0
        self.stop = threading.Event()

    def publish(self, q: nn.Module) -> None:
        """Copy the learner's weights into the collector's policy (called by the learner)."""
        with self.policy_lock:
            self.policy.load_state_dict(q.state_dict())

    def epsilon(self) -> float:
        return max(0.05, 1.0 - self.written / (0.5 * self.frames))

    def run(self) -> None:
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=0)
        episode_return, rows = 0.0, []
        while self.written < self.frames and not self.stop.is_set():
            obs_t = torch.as_tensor(obs, dtype=torch.float32)
            if torch.rand(()) < self.epsilon():
                action = int(torch.randint(2, ()))
            else:
                with self.policy_lock, torch.no_grad():
                    action = int(self.policy(obs_t).argmax())
            next_obs, reward, terminated, truncated, _ = env.step(action)
            rows.append((obs_t, action, next_obs, reward, terminated))
            episode_return += reward
            obs = next_obs
            if terminated or truncated:
                self.returns.append(episode_return)
                episode_return = 0.0
                obs, _ = env.reset()
            if len(rows) == self.chunk:
                self.limiter.wait_for_learner(timeout=1.0)  # don't run far ahead of the learner
                self.rb.extend(self._batch(rows))
                self.written += len(rows)
                rows = []

    def _batch(self, rows: list) -> TensorDict:
        obs, action, next_obs, reward, terminated = zip(*rows, strict=True)
        n = len(rows)
        return TensorDict(
            {
                "observation": torch.stack(obs),
                "action": torch.tensor(action),
                "policy_version": torch.full((n,), self.version()),
                "next": {
                    "observation": torch.as_tensor(np.stack(next_obs), dtype=torch.float32),
                    "reward": torch.tensor(reward, dtype=torch.float32),
                    "terminated": torch.tensor(terminated),
                },
            },
            batch_size=[n],
        )


def train(args: argparse.Namespace) -> float:
    torch.manual_seed(args.seed)
    version = PolicyVersion()
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(50_000), batch_size=args.batch_size)
    rb.append_transform(PolicyAgeFilter(version, max_policy_lag=args.max_lag))
    limiter = SampleToInsertRatio(args.samples_per_insert, tolerance=0.2, min_size_to_sample=500)
    collector = Collector(rb, limiter, version, frames=args.frames)

    q = q_network()
    target = copy.deepcopy(q).requires_grad_(False)
    optim = torch.optim.Adam(q.parameters(), lr=1e-3)
    collector.publish(q)
    collector.start()

    ds = ReplayDataset(rb, prefetch=2, min_size=500, timeout=2.0, rate_limiter=limiter)
    start, step = time.monotonic(), 0
    try:
        for step, batch in enumerate(DataLoader(ds, batch_size=None), start=1):
            if len(batch) == 0:  # every row was too old for the PolicyAgeFilter
                continue
            q_taken = q(batch["observation"]).gather(-1, batch["action"].unsqueeze(-1)).squeeze(-1)
            with torch.no_grad():
                next_q = target(batch["next", "observation"]).amax(-1)
                not_done = (~batch["next", "terminated"]).float()
                y = batch["next", "reward"] + 0.99 * not_done * next_q
            loss = nn.functional.smooth_l1_loss(q_taken, y)
            optim.zero_grad()
            loss.backward()
            optim.step()
            with torch.no_grad():
                for p, tp in zip(q.parameters(), target.parameters(), strict=True):
                    tp.lerp_(p, 0.01)
            if step % args.publish_every == 0:
                collector.publish(q)
                version.increment()
            if step % 1000 == 0:
                recent = statistics.fmean(collector.returns) if collector.returns else 0.0
                print(
                    f"step {step:6d}  frames {collector.written:6d}  return {recent:6.1f}  "
                    f"loss {loss.item():.4f}  {rb.stats()['samples_per_insert']:.2f} "
                    "samples/insert",
                    flush=True,
                )
    finally:
        collector.stop.set()
        collector.join()
        ds.close()
    stats = rb.stats()
    score = statistics.fmean(collector.returns) if collector.returns else 0.0
    print(
        f"done: {step} steps in {time.monotonic() - start:.1f}s, {collector.written} frames, "
        f"{stats['samples_per_insert']:.2f} samples/insert, learner waited "
        f"{stats['rate_limit_waits']} times ({stats['rate_limit_wait_s']:.1f}s), "
        f"last episodes' return {score:.1f}"
    )
    return score


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20_000, help="environment steps collected")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--samples-per-insert", type=float, default=8.0)
    parser.add_argument("--max-lag", type=int, default=50, help="policy versions of staleness")
    parser.add_argument("--publish-every", type=int, default=20, help="learner steps per version")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    train(parse_args())
