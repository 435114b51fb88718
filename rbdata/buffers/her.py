"""HERReplayBuffer and HindsightStrategy: Hindsight Experience Replay (torchrl's classes).

Andrychowicz et al., "Hindsight Experience Replay", NeurIPS 2017
(https://arxiv.org/abs/1707.01495).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, check_number, normalize_key
from rbdata.samplers import RandomSampler, Sampler
from rbdata.trajectories.reading import read_leaf, storage_keys
from rbdata.trajectories.runs import split_runs

from .tensordict import TensorDictReplayBuffer

__all__ = ["HERReplayBuffer", "HindsightStrategy"]

RewardFn = Callable[[TensorDictBase], torch.Tensor]


class HindsightStrategy(str, enum.Enum):
    """How :class:`HERReplayBuffer` picks the goal a transition is relabeled with.

    Attributes:
        FUTURE: the achieved goal of a later step of the same episode (or its own).
        FINAL: the achieved goal of the episode's last step.
        EPISODE: the achieved goal of any step of the episode, uniformly.
        RANDOM: the achieved goal of any item of the buffer, uniformly.

    Examples:
        >>> from rbdata import HindsightStrategy
        >>> HindsightStrategy("final") is HindsightStrategy.FINAL, HindsightStrategy.FUTURE.value
        (True, 'future')
    """

    FUTURE = "future"
    FINAL = "final"
    EPISODE = "episode"
    RANDOM = "random"

    def __str__(self) -> str:
        return str(self.value)


class HERReplayBuffer(TensorDictReplayBuffer):
    """A TensorDict replay buffer that relabels goals at sample time (Hindsight Experience Replay).

    For the first ``int(batch_size * her_ratio)`` items of each sample, the
    desired goal (``goal_key``, and ``("next", goal_key)`` when stored) is
    replaced with an achieved goal (``achieved_goal_key``) picked by
    ``strategy`` from the item's episode (or the whole buffer for
    ``"random"``), and the reward (``reward_key``) is recomputed with
    ``reward_fn`` on the relabeled items. The rest of the batch keeps its
    goals and rewards. Episodes end where ``end_key`` or the matching
    ``"terminated"`` entry is set, in slot order; a full ring also ends one
    at the newest slot, and the last written slot ends the last episode.
    The stored data is never changed. As torchrl's, the storage must be 1-d.

    Args:
        reward_fn: takes the relabeled items (a TensorDict with the new goal)
            and returns their rewards, shaped ``[*batch, 1]`` or ``[*batch]``.
        her_ratio: the fraction of each sample relabeled, in ``[0, 1]``.
        strategy: a :class:`HindsightStrategy` or its value.
        goal_key: the desired goal entry.
        achieved_goal_key: the achieved goal entry.
        reward_key: the reward entry rewritten.
        end_key: the episode-end flag (its ``"terminated"`` sibling counts too).
        sampler: draws the items (default :class:`~rbdata.RandomSampler`).
        **kwargs: the :class:`~rbdata.TensorDictReplayBuffer` arguments.

    Raises:
        ValueError: for ``her_ratio`` outside ``[0, 1]`` or an unknown strategy.
        KeyError: at sampling, when the goal entries or both end entries are not stored.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import HERReplayBuffer, LazyTensorStorage
        >>> def reward_fn(td):
        ...     hit = (td["achieved_goal"] - td["desired_goal"]).norm(dim=-1, keepdim=True) < 0.05
        ...     return hit.float()
        >>> rb = HERReplayBuffer(reward_fn, her_ratio=1.0, strategy="final",
        ...                      storage=LazyTensorStorage(100), batch_size=4)
        >>> steps = TensorDict({
        ...     "desired_goal": torch.full((4, 3), -1.0),
        ...     "achieved_goal": torch.arange(12.0).view(4, 3),
        ...     "next": {"reward": torch.zeros(4, 1),
        ...              "done": torch.tensor([[0], [0], [0], [1]]).bool()},
        ... }, batch_size=[4])
        >>> _ = rb.extend(steps)
        >>> batch = rb.sample()
        >>> batch["desired_goal"].unique(dim=0).tolist()  # the episode's final achieved goal
        [[9.0, 10.0, 11.0]]
        >>> bool((batch["next", "reward"].flatten() == (batch["index"] == 3).float()).all())
        True
    """

    def __init__(
        self,
        reward_fn: RewardFn,
        *,
        her_ratio: float = 0.8,
        strategy: HindsightStrategy | str = "future",
        goal_key: NestedKey = "desired_goal",
        achieved_goal_key: NestedKey = "achieved_goal",
        reward_key: NestedKey = ("next", "reward"),
        end_key: NestedKey = ("next", "done"),
        sampler: Sampler | None = None,
        **kwargs: Any,
    ) -> None:
        if not callable(reward_fn):
            raise TypeError(f"reward_fn must be callable, got {type(reward_fn).__name__}.")
        ratio = check_number(her_ratio, "her_ratio")
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"her_ratio must be in [0, 1], got {her_ratio}")
        try:
            chosen = HindsightStrategy(strategy)
        except ValueError as err:
            raise ValueError(
                f"strategy must be one of {[s.value for s in HindsightStrategy]}, got {strategy!r}."
            ) from err
        keys = {
            name: normalize_key(key, name)
            for name, key in (
                ("goal_key", goal_key),
                ("achieved_goal_key", achieved_goal_key),
                ("reward_key", reward_key),
                ("end_key", end_key),
            )
        }
        super().__init__(sampler=RandomSampler() if sampler is None else sampler, **kwargs)
        self.reward_fn = reward_fn
        self.her_ratio = float(ratio)
        self.strategy = chosen
        self.goal_key: NestedKey = keys["goal_key"]
        self.achieved_goal_key: NestedKey = keys["achieved_goal_key"]
        self.reward_key: NestedKey = keys["reward_key"]
        self.end_key: NestedKey = keys["end_key"]
        # the episode ends, and the (length, write count) they were computed at
        self._episode_ends_cache: torch.Tensor | None = None
        self._last_cache_key: tuple[int, int] = (-1, -1)

    # ------------------------------------------------------------- episodes
    def _terminated_key(self) -> NestedKey:
        if isinstance(self.end_key, tuple):
            return (*self.end_key[:-1], "terminated")
        return "terminated"

    def _episode_ends(self) -> torch.Tensor:
        """The last slot of each episode, sorted (cached until the next write)."""
        storage = self._storage
        stamp = (len(storage), self.write_count)
        if self._episode_ends_cache is not None and self._last_cache_key == stamp:
            return self._episode_ends_cache
        n = len(storage)
        if storage.ndim != 1:
            raise NotImplementedError(
                f"HERReplayBuffer currently only supports 1D storages (got ndim={storage.ndim})."
            )
        stored = storage_keys(storage)
        present = [key for key in (self.end_key, self._terminated_key()) if key in stored]
        if not present:
            raise KeyError(
                f"Neither {self.end_key!r} nor {self._terminated_key()!r} were found in storage. "
                "Ensure episode boundaries are stored under one of these keys."
            )
        slots = torch.arange(n)
        ends = torch.zeros(n, dtype=torch.bool)
        for key in present:
            ends |= read_leaf(storage, key, slots).reshape(n, -1).bool().any(-1).cpu()
        if n == storage.max_size_along_dim0 and storage.newest_slot is not None:
            ends[storage.newest_slot] = True  # a full ring: no episode across the write seam
        else:
            ends[n - 1] = True
        starts, lengths = split_runs(ends.numpy(), "ends")
        episode_ends = torch.from_numpy(np.asarray(starts + lengths - 1, dtype=np.int64))
        self._episode_ends_cache, self._last_cache_key = episode_ends, stamp
        return episode_ends

    def _goal_sources(self, index: torch.Tensor) -> torch.Tensor:
        """The slot whose achieved goal relabels each item of ``index``."""
        episode_ends = self._episode_ends()
        position = torch.searchsorted(episode_ends, index).clamp(max=len(episode_ends) - 1)
        end = episode_ends[position]
        start = torch.where(position == 0, torch.zeros_like(end), episode_ends[position - 1] + 1)
        count = index.shape[0]
        if self.strategy is HindsightStrategy.FUTURE:
            span = (end - index).clamp(min=0)
            draws = torch.rand(count, generator=self.generator)
            return index + (draws * (span + 1)).long().clamp(max=span)
        if self.strategy is HindsightStrategy.FINAL:
            return end.clone()
        if self.strategy is HindsightStrategy.EPISODE:
            draws = torch.rand(count, generator=self.generator)
            return start + (draws * (end - start + 1)).long()
        return torch.randint(len(self._storage), (count,), generator=self.generator)

    # ------------------------------------------------------------- sampling
    def _after_fetch(self, data: Any, index: torch.Tensor) -> Any:
        """Relabel the goals of the first ``her_ratio`` of the batch (the read path calls it)."""
        relabeled = int(index.shape[0] * self.her_ratio)
        if not relabeled or not isinstance(data, TensorDictBase) or index.ndim != 1:
            return data
        stored = storage_keys(self._storage)
        missing = [
            f"  {role}={key!r}"
            for key, role in (
                (self.goal_key, "goal_key"),
                (self.achieved_goal_key, "achieved_goal_key"),
            )
            if key not in stored
        ]
        if missing:
            raise KeyError(
                "The following keys are not present in storage:\n"
                + "\n".join(missing)
                + "\nEnsure they are stored in every transition before sampling."
            )
        sources = self._goal_sources(index[:relabeled].cpu())
        goals = read_leaf(self._storage, self.achieved_goal_key, sources)
        part = data[:relabeled]
        part.set_(self.goal_key, goals.to(part.device))
        next_goal = (
            "next",
            *((self.goal_key,) if isinstance(self.goal_key, str) else self.goal_key),
        )
        if next_goal in part.keys(True, True):
            part.set_(next_goal, goals.to(part.device))
        reward = self.reward_fn(part)
        stored_reward = part.get(self.reward_key)
        part.set_(self.reward_key, reward.reshape(stored_reward.shape).to(stored_reward.dtype))
        return data

    # ---------------------------------------------------------------- state
    def empty(self, empty_write_count: bool = True) -> None:
        """Empty the buffer (and forget the episode boundaries)."""
        super().empty(empty_write_count=empty_write_count)
        self._episode_ends_cache, self._last_cache_key = None, (-1, -1)

    def state_dict(self) -> dict[str, Any]:
        """The buffer's state, plus the relabeling settings under ``"_her"`` (as torchrl)."""
        state = super().state_dict()
        state["_her"] = {
            "goal_key": self.goal_key,
            "achieved_goal_key": self.achieved_goal_key,
            "reward_key": self.reward_key,
            "her_ratio": self.her_ratio,
            "strategy": self.strategy.value,
            "episode_ends_cache": self._episode_ends_cache,
            "last_cache_key": list(self._last_cache_key),
        }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` and its episode cache (not the settings, as torchrl)."""
        her = state_dict.get("_her")
        super().load_state_dict({k: v for k, v in state_dict.items() if k != "_her"})
        self._episode_ends_cache, self._last_cache_key = None, (-1, -1)
        if isinstance(her, dict):
            cache, stamp = her.get("episode_ends_cache"), her.get("last_cache_key")
            if (
                isinstance(cache, torch.Tensor)
                and isinstance(stamp, list | tuple)
                and len(stamp) == 2
            ):
                self._episode_ends_cache = cache.to(torch.long)
                self._last_cache_key = (int(stamp[0]), int(stamp[1]))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(strategy={self.strategy.value!r}, "
            f"her_ratio={self.her_ratio}, goal_key={self.goal_key!r}, "
            f"achieved_goal_key={self.achieved_goal_key!r}, reward_key={self.reward_key!r}, "
            f"storage={self._storage})"
        )
