"""Offline-to-online DQN on gymnasium's CartPole-v1 with rbdata.

1. Build an offline dataset: ~20k transitions of a mediocre scripted policy
   (push towards the side the pole leans to, with 20% random actions), in the
   TED layout, saved as a D4RL-style HDF5 file and read back with
   ``rbdata.load_offline_data`` (when h5py is installed).
2. Pretrain a small Double-DQN offline with a plain PyTorch loop over a
   ``ReplayDataset`` of that data (batches sampled ahead on a thread).
3. Fine-tune online: an ``OfflineToOnlineReplayBuffer`` mixes the offline data
   with fresh experience (offline share annealed 0.5 -> 0.25); a collector
   thread steps the environment with the latest published epsilon-greedy
   policy, stamps every transition with its ``PolicyVersion`` and extends the
   online part; the learner reads mixed batches through a ``DataLoader`` over a
   ``ReplayDataset`` of the mixture, whose ``SampleToInsertRatio`` keeps learner
   and collector in step.
4. Print the greedy policy's average evaluation return before and after each
   phase (a random policy averages about 20), the buffer's stats and the time.

    python examples/offline_to_online.py            # the full run, 1-2 minutes on 2 cores
    python examples/offline_to_online.py --quick    # a smoke run of a few seconds

Needs the ``examples`` extra (gymnasium); the HDF5 round trip also needs ``hdf5`` (h5py).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn
from torch.utils.data import DataLoader

from rbdata import (
    ImmutableDatasetWriter,
    OfflineToOnlineReplayBuffer,
    PolicyVersion,
    ReplayDataset,
    TensorDictReplayBuffer,
    TensorStorage,
    load_offline_data,
)
from rbdata.loader import SampleToInsertRatio

ENV_ID = "CartPole-v1"
OFFLINE_VERSION = -1  # policy_version stamped on the offline data (not made by the learner)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny settings for a smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--offline-transitions", type=int, default=20_000)
    parser.add_argument("--pretrain-updates", type=int, default=3_000)
    parser.add_argument("--online-updates", type=int, default=8_000)
    parser.add_argument(
        "--updates-per-step",
        type=float,
        default=1.0,
        help="learner updates per collected environment step",
    )
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    if args.quick:
        args.offline_transitions, args.pretrain_updates = 2_000, 200
        args.online_updates, args.eval_episodes = 300, 2
    return args


# ------------------------------------------------------------------ environment
def make_env() -> Any:
    try:
        import gymnasium as gym
    except ImportError as err:
        raise SystemExit(
            "this example needs gymnasium: pip install -c constraints.txt -e '.[examples]'"
        ) from err
    return gym.make(ENV_ID)


def scripted_action(obs: np.ndarray, rng: np.random.Generator, epsilon: float = 0.2) -> int:
    """The mediocre behaviour policy: push towards the lean of the pole, 20% random."""
    if rng.random() < epsilon:
        return int(rng.integers(2))
    return int(obs[2] > 0)


def collect_offline(n: int, seed: int) -> tuple[dict[str, np.ndarray], float]:
    """Run the scripted policy for ``n`` steps; return D4RL-style arrays and its mean return."""
    env, rng = make_env(), np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    cols: dict[str, list] = {
        k: []
        for k in (
            "observations",
            "actions",
            "rewards",
            "next_observations",
            "terminals",
            "timeouts",
        )
    }
    returns, ret = [], 0.0
    for _ in range(n):
        action = scripted_action(obs, rng)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(
            cols, (obs, action, reward, next_obs, terminated, truncated), strict=True
        ):
            cols[key].append(value)
        ret += reward
        obs = next_obs
        if terminated or truncated:
            returns.append(ret)
            ret, (obs, _) = 0.0, env.reset()
    env.close()
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    for key in ("observations", "next_observations", "rewards"):
        arrays[key] = arrays[key].astype(np.float32)
    return arrays, float(np.mean(returns))


def to_ted(arrays: dict[str, np.ndarray]) -> TensorDict:
    """The same transitions as rbdata's D4RL reader lays them out (used without h5py)."""
    n = len(arrays["actions"])
    terminated = torch.as_tensor(arrays["terminals"]).reshape(n, 1)
    truncated = torch.as_tensor(arrays["timeouts"]).reshape(n, 1)
    return TensorDict(
        {
            "observation": torch.as_tensor(arrays["observations"]),
            "action": torch.as_tensor(arrays["actions"]),
            "next": {
                "observation": torch.as_tensor(arrays["next_observations"]),
                "reward": torch.as_tensor(arrays["rewards"]).reshape(n, 1),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
            },
        },
        batch_size=[n],
    )


def load_offline(arrays: dict[str, np.ndarray], tmpdir: str) -> tuple[TensorDict, str]:
    """Write the arrays as a D4RL-style HDF5 file and read it back (or build the TED directly)."""
    if importlib.util.find_spec("h5py") is None:
        return to_ted(arrays), "built in memory (h5py not installed)"
    import h5py

    path = Path(tmpdir) / "cartpole_scripted.hdf5"
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f[key] = value
    return load_offline_data(path, progress=False), f"read back from {path.name}"


# ------------------------------------------------------------------ learning
def make_q_network(hidden: int = 64) -> nn.Module:
    return nn.Sequential(
        nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2)
    )


class DoubleDQN:
    """Double DQN with a Polyak-averaged target network and a Huber loss."""

    def __init__(self, gamma: float = 0.98, lr: float = 5e-4, tau: float = 0.005) -> None:
        self.q = make_q_network()
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.optim = torch.optim.Adam(self.q.parameters(), lr=lr)
        self.gamma, self.tau = gamma, tau

    def update(self, batch: TensorDict) -> float:
        obs, action = batch["observation"], batch["action"].long()
        reward = batch["next", "reward"].reshape(-1)
        not_terminated = (~batch["next", "terminated"]).reshape(-1).float()
        next_obs = batch["next", "observation"]
        with torch.no_grad():
            next_action = self.q(next_obs).argmax(-1, keepdim=True)
            next_value = self.target(next_obs).gather(-1, next_action).squeeze(-1)
            target = reward + self.gamma * not_terminated * next_value
        value = self.q(obs).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        loss = nn.functional.smooth_l1_loss(value, target)
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), 10.0)
        self.optim.step()
        with torch.no_grad():
            for p, tp in zip(self.q.parameters(), self.target.parameters(), strict=True):
                tp.lerp_(p, self.tau)
        return float(loss.detach())


def evaluate(q: nn.Module | None, episodes: int, seed: int) -> float:
    """Average return of the greedy policy (``q=None``: uniformly random actions)."""
    env, rng, returns = make_env(), np.random.default_rng(seed), []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, ret = False, 0.0
        while not done:
            if q is None:
                action = int(rng.integers(2))
            else:
                with torch.no_grad():
                    action = int(q(torch.as_tensor(obs)).argmax())
            obs, reward, terminated, truncated, _ = env.step(action)
            ret += reward
            done = terminated or truncated
        returns.append(ret)
    env.close()
    return float(np.mean(returns))


# ------------------------------------------------------------------ online collection
class Collector(threading.Thread):
    """Steps the environment with the latest published policy and extends the buffer."""

    def __init__(
        self,
        rb: OfflineToOnlineReplayBuffer,
        q: nn.Module,
        version: PolicyVersion,
        limiter: SampleToInsertRatio,
        epsilon: Any,
        seed: int,
        chunk: int = 8,
    ) -> None:
        super().__init__(name="collector", daemon=True)
        self.rb, self.version, self.limiter, self.epsilon = rb, version, limiter, epsilon
        self.policy, self.policy_version = copy.deepcopy(q), version()
        self.published: dict[str, torch.Tensor] = {}
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.rng, self.seed, self.chunk = np.random.default_rng(seed), seed, chunk
        self.steps, self.returns, self.error = 0, [], None

    def publish(self, q: nn.Module) -> None:
        """Called by the learner: hand over new weights and move the policy version on."""
        with self.lock:
            self.published = {k: v.detach().clone() for k, v in q.state_dict().items()}
            self.version.increment()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as err:  # reported by the learner thread
            self.error = err

    def _run(self) -> None:
        env = make_env()
        obs, _ = env.reset(seed=self.seed)
        ret, rows = 0.0, []
        while not self.stop.is_set():
            with self.lock:
                if self.version() != self.policy_version:
                    self.policy.load_state_dict(self.published)
                    self.policy_version = self.version()
            if self.rng.random() < self.epsilon(self.steps):
                action = int(self.rng.integers(2))
            else:
                with torch.no_grad():
                    action = int(self.policy(torch.as_tensor(obs)).argmax())
            next_obs, reward, terminated, truncated, _ = env.step(action)
            rows.append((obs, action, next_obs, reward, terminated, truncated, self.policy_version))
            self.steps, ret, obs = self.steps + 1, ret + reward, next_obs
            if terminated or truncated:
                self.returns.append(ret)
                ret, (obs, _) = 0.0, env.reset()
            if len(rows) == self.chunk:
                while not self.limiter.wait_for_learner(timeout=0.2):  # don't outrun the learner
                    if self.stop.is_set():
                        return
                self.rb.extend(_rows_to_td(rows))
                rows = []
        env.close()


def _rows_to_td(rows: list[tuple]) -> TensorDict:
    obs, action, next_obs, reward, terminated, truncated, version = zip(*rows, strict=True)
    n = len(rows)
    terminated_t = torch.tensor(terminated).reshape(n, 1)
    truncated_t = torch.tensor(truncated).reshape(n, 1)
    return TensorDict(
        {
            "observation": torch.as_tensor(np.stack(obs)),
            "action": torch.tensor(action),
            "policy_version": torch.tensor(version),
            "next": {
                "observation": torch.as_tensor(np.stack(next_obs)),
                "reward": torch.tensor(reward, dtype=torch.float32).reshape(n, 1),
                "terminated": terminated_t,
                "truncated": truncated_t,
                "done": terminated_t | truncated_t,
            },
        },
        batch_size=[n],
    )


def linear(start: float, end: float, steps: int) -> Any:
    """A schedule: ``start`` at 0, ``end`` from ``steps`` on, linear in between."""
    return lambda n: end + (start - end) * max(0.0, 1.0 - n / max(1, steps))


# ------------------------------------------------------------------ phases
class Logger:
    """Prints progress lines stamped with the time since the start."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def __call__(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)


def build_offline_buffer(
    args: argparse.Namespace, generator: torch.Generator, log: Logger
) -> tuple[TensorDictReplayBuffer, float]:
    """Step 1: collect, save as HDF5, load back, wrap in a read-only buffer."""
    arrays, behaviour_return = collect_offline(args.offline_transitions, args.seed)
    with tempfile.TemporaryDirectory() as tmpdir:
        offline_td, how = load_offline(arrays, tmpdir)
    # Both parts of the mixture hold the same entries: the online data is stamped with the
    # learner's policy version, the offline data with OFFLINE_VERSION.
    offline_td["policy_version"] = torch.full((offline_td.shape[0],), OFFLINE_VERSION)
    log(
        f"offline dataset: {offline_td.shape[0]} transitions of the scripted policy ({how}); "
        f"its average return: {behaviour_return:.1f}"
    )
    buffer = TensorDictReplayBuffer(
        storage=TensorStorage(offline_td), writer=ImmutableDatasetWriter(), generator=generator
    )
    return buffer, behaviour_return


def pretrain(
    agent: DoubleDQN, offline: TensorDictReplayBuffer, args: argparse.Namespace, log: Logger
) -> None:
    """Step 2: a plain PyTorch loop over a ReplayDataset (2 batches sampled ahead)."""
    dataset = ReplayDataset(
        offline, batch_size=args.batch_size, num_batches=args.pretrain_updates, prefetch=2
    )
    with dataset:
        for i, batch in enumerate(DataLoader(dataset, batch_size=None), 1):
            loss = agent.update(batch)
            if i % max(1, args.pretrain_updates // 4) == 0:
                log(f"pretraining {i}/{args.pretrain_updates}: loss {loss:.3f}")


def finetune(
    agent: DoubleDQN,
    offline: TensorDictReplayBuffer,
    args: argparse.Namespace,
    generator: torch.Generator,
    log: Logger,
) -> tuple[OfflineToOnlineReplayBuffer, int, int]:
    """Step 3: learn from mixed batches while a collector thread feeds the online part.

    Returns the buffer, the number of environment steps and the final policy version.
    """
    updates = args.online_updates
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=50_000,
        offline_fraction=linear(0.5, 0.25, updates),
        batch_size=args.batch_size,
        generator=generator,
    )
    limiter = SampleToInsertRatio(
        args.batch_size * args.updates_per_step, min_size_to_sample=4 * args.batch_size
    )
    # The learner's mixed batches come from a ReplayDataset over the mixture: the
    # limiter (attached to it) makes it wait for the collector; a pass ends early
    # if no data comes for 30 s (the collector died).
    dataset = ReplayDataset(rb, num_batches=updates, prefetch=1, rate_limiter=limiter, timeout=30)
    version = PolicyVersion()
    collector = Collector(
        rb,
        agent.q,
        version,
        limiter,
        seed=args.seed + 1,
        epsilon=linear(0.2, 0.02, int(updates / args.updates_per_step) // 2),
    )
    lr = agent.optim.param_groups[0]["lr"]
    collector.start()
    try:
        for i, batch in enumerate(DataLoader(dataset, batch_size=None), 1):
            for group in agent.optim.param_groups:  # anneal the learning rate to 10%
                group["lr"] = lr * (1.0 - 0.9 * i / updates)
            loss = agent.update(batch)
            if i % 50 == 0:
                collector.publish(agent.q)
            if i % max(1, updates // 8) == 0:
                online = ~batch["is_offline"]
                age = float((version() - batch["policy_version"][online]).float().mean())
                recent = collector.returns[-10:]
                log(
                    f"online {i}/{updates}: loss {loss:.3f}, env steps {collector.steps}, "
                    f"offline share {1 - online.float().mean():.2f}, online rows {age:.0f} policy "
                    f"versions old on average, collector return (last 10) "
                    f"{np.mean(recent) if recent else float('nan'):.1f}"
                )
    finally:
        dataset.close()
        collector.stop.set()
        collector.join()
    if collector.error is not None:
        raise RuntimeError("the collector thread failed") from collector.error
    return rb, collector.steps, version()


def _main(args: argparse.Namespace) -> dict[str, Any]:
    log = Logger()
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    offline, behaviour_return = build_offline_buffer(args, generator, log)

    agent = DoubleDQN()
    results: dict[str, Any] = {"behaviour": behaviour_return}
    results["random"] = evaluate(None, args.eval_episodes, seed=10_000)
    results["before_pretraining"] = evaluate(agent.q, args.eval_episodes, seed=10_000)
    log(
        f"eval return: random policy {results['random']:.1f}, untrained Q-network "
        f"{results['before_pretraining']:.1f}"
    )

    pretrain(agent, offline, args, log)
    results["after_pretraining"] = evaluate(agent.q, args.eval_episodes, seed=10_000)
    log(f"eval return after offline pretraining: {results['after_pretraining']:.1f}")

    rb, results["env_steps"], final_version = finetune(agent, offline, args, generator, log)
    results["after_finetuning"] = evaluate(agent.q, args.eval_episodes, seed=10_000)
    results["stats"] = stats = rb.stats()
    results["seconds"] = log.elapsed()

    print("\n=== summary ===")
    print(f"behaviour (scripted) policy return       {behaviour_return:7.1f}")
    print(f"random policy return                     {results['random']:7.1f}")
    print(f"eval return before offline pretraining   {results['before_pretraining']:7.1f}")
    print(f"eval return after offline pretraining    {results['after_pretraining']:7.1f}")
    print(f"eval return after online fine-tuning     {results['after_finetuning']:7.1f}")
    print(
        f"buffer: {stats['offline_size']} offline + {stats['online_size']} online transitions "
        f"({results['env_steps']} env steps), {stats['batches_sampled']} mixed batches, final "
        f"offline fraction {stats['offline_fraction']:.2f}, sampled/inserted items "
        f"{stats.get('samples_per_insert', float('nan')):.1f}, policy version "
        f"{final_version}"
    )
    print(f"total time {results['seconds']:.1f}s")
    return results


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _main(args)
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    main()
