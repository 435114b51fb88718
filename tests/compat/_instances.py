"""One ordinary instance of each core class, built the same way in either library."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict


def episodes(n: int = 12, length: int = 4) -> TensorDict:
    """``n`` transitions in episodes of ``length`` steps (TED layout, done at each end)."""
    step = torch.arange(n)
    done = ((step + 1) % length == 0)[:, None]
    return TensorDict(
        {
            "observation": step[:, None].float().expand(n, 3).clone(),
            "action": step % 2,
            "episode": step // length,
            "next": {
                "observation": (step[:, None] + 1).float().expand(n, 3).clone(),
                "reward": torch.ones(n, 1),
                "done": done,
                "terminated": done.clone(),
                "truncated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def example(ns: Any, name: str, scratch: Any) -> Any:
    """An instance of ``ns.<name>`` (the class itself where it is abstract)."""
    builders = {
        "ReplayBuffer": lambda: ns.ReplayBuffer(),
        "TensorDictReplayBuffer": lambda: ns.TensorDictReplayBuffer(),
        "PrioritizedReplayBuffer": lambda: ns.PrioritizedReplayBuffer(alpha=0.7, beta=0.5),
        "TensorDictPrioritizedReplayBuffer": lambda: ns.TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=0.5
        ),
        "ListStorage": lambda: ns.ListStorage(10),
        "LazyStackStorage": lambda: ns.LazyStackStorage(10),
        "TensorStorage": lambda: ns.TensorStorage(torch.zeros(10, 3)),
        "LazyTensorStorage": lambda: ns.LazyTensorStorage(10),
        "LazyMemmapStorage": lambda: ns.LazyMemmapStorage(10, scratch_dir=scratch),
        "RandomSampler": lambda: ns.RandomSampler(),
        "SamplerWithoutReplacement": lambda: ns.SamplerWithoutReplacement(),
        "PrioritizedSampler": lambda: ns.PrioritizedSampler(10, 0.7, 0.5),
        "SliceSampler": lambda: ns.SliceSampler(num_slices=2),
        "SliceSamplerWithoutReplacement": lambda: ns.SliceSamplerWithoutReplacement(num_slices=2),
        "PrioritizedSliceSampler": lambda: ns.PrioritizedSliceSampler(10, 0.7, 0.5, num_slices=2),
        "RoundRobinWriter": lambda: ns.RoundRobinWriter(),
        "TensorDictRoundRobinWriter": lambda: ns.TensorDictRoundRobinWriter(),
        "TensorDictMaxValueWriter": lambda: ns.TensorDictMaxValueWriter(),
        "ImmutableDatasetWriter": lambda: ns.ImmutableDatasetWriter(),
        "Transition": lambda: ns.Transition(),
        "Sequence": lambda: ns.Sequence(4),
        "Trajectory": lambda: _buffer_of_episodes(ns).query()[0],
        "ConditionalUpdateResult": lambda: _conditional_update(ns),
        "Compose": lambda: ns.Compose(),
        "PolicyAgeFilter": lambda: ns.PolicyAgeFilter(0, 1),
        "ConsumingSampler": lambda: ns.ConsumingSampler(),
        "StalenessAwareSampler": lambda: ns.StalenessAwareSampler(),
        "StreamingSliceSampler": lambda: ns.StreamingSliceSampler(slice_len=2),
        "PromptGroupSampler": lambda: ns.PromptGroupSampler(num_groups=1),
        "RemoteTensorDictReplayBuffer": lambda: ns.RemoteTensorDictReplayBuffer(),
        # StoreStorage (a Redis server) and RayReplayBuffer (a Ray actor): their classes
        "OfflineToOnlineReplayBuffer": lambda: ns.OfflineToOnlineReplayBuffer(
            _buffer_of_episodes(ns), online_capacity=10, batch_size=4
        ),
    }
    return builders[name]() if name in builders else getattr(ns, name)


def _buffer_of_episodes(ns: Any) -> Any:
    rb = ns.TensorDictReplayBuffer(storage=ns.LazyTensorStorage(12), batch_size=4)
    rb.extend(episodes())
    return rb


def _conditional_update(ns: Any) -> Any:
    rb = ns.TensorDictReplayBuffer(
        storage=ns.LazyTensorStorage(12),
        writer=ns.TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    )
    rb.extend(episodes())
    sample = rb.sample()
    return rb.update_if_present(
        index=sample["index"],
        generation=sample["index_generation"],
        patch={"action": torch.zeros(4, dtype=torch.long)},
    )
