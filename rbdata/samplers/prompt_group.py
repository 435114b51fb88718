"""PromptGroupSampler: batches of whole groups of items sharing a key (GRPO-style; torchrl's)."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, check_bool, check_int, normalize_key
from rbdata.samplers._base import Sampler
from rbdata.samplers._live import _LiveSet
from rbdata.storages import Storage

__all__ = ["PromptGroupSampler"]

_STRATEGIES = ("random", "recency", "reward", "variance")


class PromptGroupSampler(Sampler):
    """Draw ``num_groups`` groups and ``samples_per_group`` items of each, per batch.

    Items belong to the group of their value under ``group_key`` (in LLM
    post-training the prompt, as an id or its text). A batch of ``batch_size``
    items is ``num_groups`` groups of ``samples_per_group`` items, group by
    group: the layout group-relative objectives (GRPO) need. Give exactly one
    of ``num_groups`` / ``samples_per_group``; the other is ``batch_size``
    divided by it. Nothing is consumed: past generations of a group stay
    drawable (replay-enhanced GRPO).

    Which items of a group are drawn (``strategy``): ``"random"`` (uniform),
    ``"recency"`` (the last written), ``"reward"`` (the highest
    ``reward_key``, averaged over trailing dims), ``"variance"`` (the subset
    of that size with the largest reward variance, then the largest total).
    Groups are chosen uniformly. A group smaller than ``samples_per_group`` (or
    fewer groups than ``num_groups``) is completed with draws with
    replacement, with a warning (once).

    Keyword Args:
        num_groups: groups per batch (or ``samples_per_group``).
        samples_per_group: items per group (or ``num_groups``).
        group_key: the entry naming each item's group. Defaults to ``"query"``.
        strategy: ``"random"`` (default), ``"recency"``, ``"reward"`` or ``"variance"``.
        reward_key: the reward entry (``"reward"``/``"variance"``). Defaults to
            ``("next", "reward")``.
        cache_groups: keep the group index until the next write (default True);
            False reads the groups at every draw (group values edited in place).
        replacement: accepted for torchrl compatibility: True changes nothing;
            False raises ``TypeError`` (this sampler has no without-replacement variant).

    Raises:
        TypeError: if neither or both of ``num_groups`` / ``samples_per_group`` are
            given, or one is not an int.
        ValueError: for a non-positive count or an unknown strategy.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyStackStorage, PromptGroupSampler, ReplayBuffer
        >>> rb = ReplayBuffer(
        ...     storage=LazyStackStorage(100),
        ...     sampler=PromptGroupSampler(num_groups=2, group_key="prompt"),
        ...     batch_size=8,
        ... )
        >>> data = TensorDict(
        ...     {"prompt": torch.arange(12) // 4, "reward": torch.arange(12.0)}, batch_size=[12]
        ... )
        >>> _ = rb.extend(data)
        >>> sample = rb.sample()
        >>> int(sample["prompt"].unique().numel()), int(sample.shape[0])
        (2, 8)
    """

    def __init__(
        self,
        *,
        num_groups: int | None = None,
        samples_per_group: int | None = None,
        group_key: NestedKey = "query",
        strategy: str = "random",
        reward_key: NestedKey = ("next", "reward"),
        cache_groups: bool = True,
        replacement: bool = True,
    ) -> None:
        super().__init__(replacement=replacement)
        if (num_groups is None) == (samples_per_group is None):
            raise TypeError(
                "Exactly one of num_groups or samples_per_group must be provided, "
                f"got num_groups={num_groups} and samples_per_group={samples_per_group}."
            )
        self.num_groups = (
            None if num_groups is None else check_int(num_groups, "num_groups", minimum=1)
        )
        self.samples_per_group = (
            None
            if samples_per_group is None
            else check_int(samples_per_group, "samples_per_group", minimum=1)
        )
        if strategy not in _STRATEGIES:
            raise ValueError(f"Unknown strategy={strategy!r}. Expected one of {_STRATEGIES}.")
        self.group_key = normalize_key(group_key, "group_key")
        self.strategy = strategy
        self.reward_key = normalize_key(reward_key, "reward_key")
        self.cache_groups = check_bool(cache_groups, "cache_groups")
        self._group_index: dict[Any, torch.Tensor] | None = None  # torchrl's attribute name
        self._cached_for: tuple[int, int, int] | None = None  # storage id, length, revision
        self._rewards: torch.Tensor | None = None
        self._recency: torch.Tensor | None = None  # per slot: when it was written (-1: unknown)
        self._clock = 0
        self._warned_small = False

    def set_consume_after_n(self, n: int | None) -> None:
        """Not supported (``n`` must be None): groups are replayed, never consumed."""
        if n is not None:
            raise ValueError(
                f"PromptGroupSampler does not support consume_after_n_samples (got {n!r})."
            )
        super().set_consume_after_n(None)

    # ------------------------------------------------------------ sampling
    def _shape(self, batch_size: int) -> tuple[int, int]:
        per = self.num_groups if self.num_groups is not None else self.samples_per_group
        assert per is not None
        if batch_size % per:
            name = "num_groups" if self.num_groups is not None else "samples_per_group"
            raise ValueError(f"batch_size={batch_size} is not divisible by {name}={per}.")
        other = batch_size // per
        return (per, other) if self.num_groups is not None else (other, per)

    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        if storage.ndim > 1:
            raise NotImplementedError(
                f"PromptGroupSampler only supports 1-dimensional storages, got ndim={storage.ndim}."
            )
        num_groups, per_group = self._shape(batch_size)
        groups = self._groups_of(storage)
        keys = list(groups)
        order = torch.randperm(len(keys), generator=self._rng)
        chosen = [keys[i] for i in order[:num_groups].tolist()]
        if len(keys) < num_groups:
            self._warn_small()
            extra = torch.randint(len(keys), (num_groups - len(keys),), generator=self._rng)
            chosen += [keys[i] for i in extra.tolist()]
        index = torch.cat([self._within(groups[key], per_group) for key in chosen])
        return index, {}

    def _groups_of(self, storage: Storage) -> dict[Any, torch.Tensor]:
        """The slots of every group, cached until the storage (or its content) changes.

        Another buffer over the same storage may write: its writes move the storage's
        ``revision``.
        """
        n = len(storage)
        if (
            self._group_index is not None
            and self.cache_groups
            and self._cached_for == (id(storage), n, storage.revision)
        ):
            return self._group_index
        data = storage[:]
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                "PromptGroupSampler needs a 1-dimensional storage whose items are "
                "TensorDicts (LazyTensorStorage, LazyMemmapStorage, LazyStackStorage). Plain "
                f"ListStorage is not supported: got {type(storage).__name__} returning "
                f"{type(data).__name__}."
            )
        values = data.get(self.group_key)
        tensorish = isinstance(values, torch.Tensor | TensorDictBase)  # NonTensorStack: a TD
        listed = values.tolist() if tensorish else list(values)
        if len(listed) != n:
            raise RuntimeError(
                f"group_key={self.group_key!r} holds {len(listed)} values for {n} items."
            )
        positions: dict[Any, list[int]] = {}
        for slot, value in enumerate(listed):
            key = tuple(value) if isinstance(value, list) else value
            positions.setdefault(key, []).append(slot)
        groups = {key: torch.tensor(slots, dtype=torch.long) for key, slots in positions.items()}
        if self.strategy in ("reward", "variance"):
            reward = data.get(self.reward_key)
            if not isinstance(reward, torch.Tensor):
                raise TypeError(
                    f"The {self.strategy!r} strategy requires reward_key={self.reward_key!r} to "
                    f"hold a tensor, got {type(reward).__name__}."
                )
            self._rewards = reward.reshape(n, -1).float().mean(-1).cpu()
        if self.strategy == "recency":
            self._fill_recency(n)
        self._group_index, self._cached_for = groups, (id(storage), n, storage.revision)
        return groups

    def _within(self, slots: torch.Tensor, k: int) -> torch.Tensor:
        n = slots.numel()
        if n < k:
            self._warn_small()
            extra = slots[torch.randint(n, (k - n,), generator=self._rng)]
            return torch.cat([self._within(slots, n), extra])
        if self.strategy == "recency":
            assert self._recency is not None
            return slots[torch.argsort(self._recency[slots])[n - k :]]
        if self.strategy == "reward":
            assert self._rewards is not None
            return slots[torch.topk(self._rewards[slots], k).indices]
        if self.strategy == "variance":
            return self._max_variance(slots, k)
        return slots[torch.randperm(n, generator=self._rng)[:k]]

    def _max_variance(self, slots: torch.Tensor, k: int) -> torch.Tensor:
        """The ``k`` items whose rewards vary most: the ``j`` lowest and ``k - j`` highest."""
        assert self._rewards is not None
        rewards = self._rewards[slots].double()
        order = torch.argsort(rewards)
        ranked = rewards[order]
        n = ranked.numel()
        sums = torch.cat([ranked.new_zeros(1), ranked.cumsum(0)])
        squares = torch.cat([ranked.new_zeros(1), ranked.square().cumsum(0)])
        low = torch.arange(k + 1)
        high = k - low
        total = sums[low] + sums[n] - sums[n - high]
        total_sq = squares[low] + squares[n] - squares[n - high]
        variance = total_sq / k - (total / k).square()
        best = torch.isclose(variance, variance.max(), rtol=1e-12, atol=1e-12)
        j = int(torch.where(best, total, torch.full_like(total, -torch.inf)).argmax())
        rank = torch.arange(n)
        return slots[order[(rank < j) | (rank >= n - (k - j))]]

    def _warn_small(self) -> None:
        if not self._warned_small:
            self._warned_small = True
            warnings.warn(
                "A group (or the set of groups) was smaller than the requested sample size; "
                "completing the draw with replacement. Add more data or lower "
                "num_groups/samples_per_group to avoid this.",
                UserWarning,
                stacklevel=4,
            )

    # ------------------------------------------------------------ recency
    def _stamp(self, index: torch.Tensor) -> None:
        if not index.numel():
            return
        size = int(index.max()) + 1
        self._grow_recency(size)
        assert self._recency is not None
        clock = torch.arange(self._clock + 1, self._clock + 1 + index.numel())
        self._recency[index] = clock
        self._clock += index.numel()

    def _grow_recency(self, size: int) -> None:
        if self._recency is None:
            self._recency = torch.full((size,), -1, dtype=torch.long)
        elif self._recency.numel() < size:
            pad = torch.full((size - self._recency.numel(),), -1, dtype=torch.long)
            self._recency = torch.cat([self._recency, pad])

    def _fill_recency(self, n: int) -> None:
        """Slots never seen written (a storage built with data) count as older, in slot order."""
        self._grow_recency(n)
        assert self._recency is not None
        recency = self._recency[:n]
        missing = (recency < 0).nonzero().reshape(-1)
        if not missing.numel():
            return
        known = recency[recency >= 0]
        stop = int(known.min()) if known.numel() else missing.numel()
        recency[missing] = torch.arange(stop - missing.numel(), stop)
        self._clock = max(self._clock, stop)

    # ------------------------------------------------------------ hooks
    def _on_write(self, index: torch.Tensor) -> None:
        if self.strategy == "recency":
            self._stamp(index.cpu())
        self._group_index, self._rewards = None, None

    def _on_update(self, index: torch.Tensor) -> None:
        self._on_write(index)

    def _on_empty(self) -> None:
        self._group_index, self._rewards, self._recency = None, None, None
        self._clock = 0
        self._warned_small = False

    def state_dict(self) -> dict[str, Any]:
        """The recency stamps (torchrl's keys; empty without them): nothing else is kept."""
        return self._extra_state()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_group_index"], state["_rewards"], state["_cached_for"] = None, None, None
        return state

    def _extra_state(self) -> dict[str, Any]:
        if self._recency is None:
            return {}
        return {"position_recency": self._recency.clone(), "recency_clock": self._clock}

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        recency = state_dict.get("position_recency")
        if recency is not None and not isinstance(recency, torch.Tensor):
            raise TypeError(f"position_recency must be a tensor, got {type(recency).__name__}.")
        clock = check_int(state_dict.get("recency_clock", 0), "recency_clock", minimum=0)
        self._recency = None if recency is None else recency.clone().long().cpu()
        self._clock = clock
        self._group_index, self._rewards = None, None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_groups={self.num_groups}, "
            f"samples_per_group={self.samples_per_group}, group_key={self.group_key!r}, "
            f"strategy={self.strategy!r})"
        )
