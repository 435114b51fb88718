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
   phase (a random policy averages about 20), the buffer's stats and the time,
   and write the learning curve (evaluation return, collector return and the
   batches' offline share against updates) as ``curve_<trainer>.csv`` and
   ``curve_<trainer>.png`` in ``--out``.

With ``--trainer lightning`` both phases run under ``lightning.Trainer.fit``
instead: a ``ReplayDataModule`` serves the offline buffer, then the
``OfflineToOnlineReplayBuffer`` (its ``samples_per_insert`` pacing the
learner), a ``ReplayCallback`` publishes the policy version, and the same
collector thread, started when training starts, feeds the online part. (One
difference: that ratio lets the learner start after the first insert, where
the plain loop's limiter waits for four batches of online data.)

    python examples/offline_to_online.py                      # the full run, 1-2 minutes
    python examples/offline_to_online.py --quick              # a smoke run of a few seconds
    python examples/offline_to_online.py --trainer lightning  # the same run under Lightning

Needs the ``examples`` extra (gymnasium, matplotlib for the plot); the HDF5 round
trip also needs ``hdf5`` (h5py), ``--trainer lightning`` the ``lightning`` extra.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import sys
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside this script
from learning_curve import Curve  # noqa: E402

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
    parser.add_argument(
        "--trainer",
        choices=("plain", "lightning"),
        default="plain",
        help="a plain PyTorch loop over DataLoaders, or lightning.Trainer.fit",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs/offline_to_online"),
        help="where the curve and the Lightning log go (runs/ is git-ignored)",
    )
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

    def update(self, batch: TensorDict, optimizer: Any = None, backward: Any = None) -> float:
        """One gradient step; under Lightning, its optimizer wrapper and manual_backward."""
        optimizer = optimizer or self.optim
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
        optimizer.zero_grad(set_to_none=True)
        (backward or torch.Tensor.backward)(loss)
        nn.utils.clip_grad_norm_(self.q.parameters(), 10.0)
        optimizer.step()
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


# ------------------------------------------------------------------ progress
class Logger:
    """Prints progress lines stamped with the time since the start."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def __call__(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)


class PretrainSteps:
    """After each offline update: evaluate and record a point four times per phase."""

    def __init__(self, agent: DoubleDQN, args: argparse.Namespace, log: Logger, curve: Curve):
        self.agent, self.args, self.log, self.curve = agent, args, log, curve
        self.every = max(1, args.pretrain_updates // 4)

    def __call__(self, i: int, batch: TensorDict, loss: float) -> None:
        if i % self.every:
            return
        ret = evaluate(self.agent.q, self.args.eval_episodes, seed=10_000)
        self.curve.add(update=i, phase="offline", eval_return=ret, offline_share=1.0, loss=loss)
        self.log(f"pretraining {i}/{self.args.pretrain_updates}: loss {loss:.3f}, eval {ret:.1f}")


class OnlineSteps:
    """After each fine-tuning update: anneal the learning rate, publish, record progress."""

    def __init__(
        self,
        agent: DoubleDQN,
        collector: Collector,
        args: argparse.Namespace,
        log: Logger,
        curve: Curve,
    ) -> None:
        self.agent, self.collector, self.args, self.log, self.curve = (
            agent,
            collector,
            args,
            log,
            curve,
        )
        self.lr = agent.optim.param_groups[0]["lr"]
        self.every = max(1, args.online_updates // 8)

    def __call__(self, i: int, batch: TensorDict, loss: float) -> None:
        updates = self.args.online_updates
        for group in self.agent.optim.param_groups:  # anneal the learning rate to 10%
            group["lr"] = self.lr * (1.0 - 0.9 * min(1.0, (i + 1) / updates))
        if i % 50 == 0:
            self.collector.publish(self.agent.q)
        if i % self.every:
            return
        online = ~batch["is_offline"]
        version = self.collector.version()
        age = float((version - batch["policy_version"][online]).float().mean())
        recent = self.collector.returns[-10:]
        collector_return = float(np.mean(recent)) if recent else float("nan")
        share = float(1 - online.float().mean())
        ret = evaluate(self.agent.q, self.args.eval_episodes, seed=10_000)
        self.curve.add(
            update=self.args.pretrain_updates + i,
            phase="online",
            eval_return=ret,
            collector_return=collector_return,
            offline_share=share,
            loss=loss,
        )
        self.log(
            f"online {i}/{updates}: loss {loss:.3f}, eval {ret:.1f}, env steps "
            f"{self.collector.steps}, offline share {share:.2f}, online rows {age:.0f} policy "
            f"versions old on average, collector return (last 10) {collector_return:.1f}"
        )


# ------------------------------------------------------------------ phases
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


def mixture(
    offline: TensorDictReplayBuffer, args: argparse.Namespace, generator: torch.Generator
) -> OfflineToOnlineReplayBuffer:
    """The fine-tuning buffer: offline share annealed 0.5 -> 0.25 over the updates."""
    return OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=50_000,
        offline_fraction=linear(0.5, 0.25, args.online_updates),
        batch_size=args.batch_size,
        generator=generator,
    )


def make_collector(
    rb: OfflineToOnlineReplayBuffer,
    agent: DoubleDQN,
    limiter: SampleToInsertRatio,
    version: PolicyVersion,
    args: argparse.Namespace,
) -> Collector:
    """The collector thread (epsilon annealed 0.2 -> 0.02 over the first half)."""
    steps = int(args.online_updates / args.updates_per_step) // 2
    return Collector(
        rb, agent.q, version, limiter, seed=args.seed + 1, epsilon=linear(0.2, 0.02, steps)
    )


def pretrain(
    agent: DoubleDQN,
    offline: TensorDictReplayBuffer,
    args: argparse.Namespace,
    after_step: PretrainSteps,
) -> None:
    """Step 2: a plain PyTorch loop over a ReplayDataset (2 batches sampled ahead)."""
    dataset = ReplayDataset(
        offline, batch_size=args.batch_size, num_batches=args.pretrain_updates, prefetch=2
    )
    with dataset:
        for i, batch in enumerate(DataLoader(dataset, batch_size=None), 1):
            after_step(i, batch, agent.update(batch))


def finetune(
    agent: DoubleDQN,
    rb: OfflineToOnlineReplayBuffer,
    args: argparse.Namespace,
    log: Logger,
    curve: Curve,
) -> Collector:
    """Step 3: learn from mixed batches while a collector thread feeds the online part."""
    limiter = SampleToInsertRatio(
        args.batch_size * args.updates_per_step, min_size_to_sample=4 * args.batch_size
    )
    # The learner's mixed batches come from a ReplayDataset over the mixture: the
    # limiter (attached to it) makes it wait for the collector; a pass ends early
    # if no data comes for 30 s (the collector died).
    dataset = ReplayDataset(
        rb, num_batches=args.online_updates, prefetch=1, rate_limiter=limiter, timeout=30
    )
    collector = make_collector(rb, agent, limiter, PolicyVersion(), args)
    after_step = OnlineSteps(agent, collector, args, log, curve)
    collector.start()
    try:
        for i, batch in enumerate(DataLoader(dataset, batch_size=None), 1):
            after_step(i, batch, agent.update(batch))
    finally:
        dataset.close()
        collector.stop.set()
        collector.join()
    return collector


def lightning_phases() -> Any:
    """The Lightning versions of steps 2 and 3 (offline_to_online_lightning.py beside this)."""
    import offline_to_online_lightning

    return offline_to_online_lightning


def _main(args: argparse.Namespace) -> dict[str, Any]:
    log, curve = Logger(), Curve()
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    offline, behaviour_return = build_offline_buffer(args, generator, log)

    agent = DoubleDQN()
    results: dict[str, Any] = {"behaviour": behaviour_return, "trainer": args.trainer}
    results["random"] = evaluate(None, args.eval_episodes, seed=10_000)
    results["before_pretraining"] = evaluate(agent.q, args.eval_episodes, seed=10_000)
    curve.add(
        update=0, phase="offline", eval_return=results["before_pretraining"], offline_share=1.0
    )
    log(
        f"eval return: random policy {results['random']:.1f}, untrained Q-network "
        f"{results['before_pretraining']:.1f}"
    )

    phases = lightning_phases() if args.trainer == "lightning" else None
    pretrain_steps = PretrainSteps(agent, args, log, curve)
    if phases is None:
        pretrain(agent, offline, args, pretrain_steps)
    else:
        phases.pretrain(agent, offline, args, pretrain_steps)
    results["after_pretraining"] = evaluate(agent.q, args.eval_episodes, seed=10_000)
    log(f"eval return after offline pretraining: {results['after_pretraining']:.1f}")

    rb = mixture(offline, args, generator)
    if phases is None:
        collector = finetune(agent, rb, args, log, curve)
    else:
        collector = phases.finetune(
            agent, rb, args, make_collector, lambda c: OnlineSteps(agent, c, args, log, curve)
        )
    if collector.error is not None:
        raise RuntimeError("the collector thread failed") from collector.error
    results["env_steps"], final_version = collector.steps, collector.version()
    results["after_finetuning"] = evaluate(agent.q, args.eval_episodes, seed=10_000)
    results["stats"] = stats = rb.stats()
    results["seconds"] = log.elapsed()
    results["curve"] = save_curve(curve, args)

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
    print(f"learning curve: {', '.join(str(p) for p in results['curve'])}")
    print(f"total time {results['seconds']:.1f}s ({args.trainer} trainer)")
    return results


def save_curve(curve: Curve, args: argparse.Namespace) -> list[Path]:
    """Write ``curve_<trainer>.csv`` (and ``.png`` when matplotlib is there) into ``--out``."""
    args.out.mkdir(parents=True, exist_ok=True)
    paths = [args.out / f"curve_{args.trainer}.csv"]
    curve.write_csv(paths[0])
    title = f"offline-to-online DQN on {ENV_ID} ({args.trainer} trainer)"
    if curve.plot(args.out / f"curve_{args.trainer}.png", title):
        paths.append(args.out / f"curve_{args.trainer}.png")
    return paths


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
