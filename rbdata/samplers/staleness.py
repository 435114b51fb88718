"""StalenessAwareSampler: draws weighted by freshness, stale items left out (torchrl's name)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rbdata._component.checks import NestedKey, check_int, normalize_key
from rbdata.samplers._base import Sampler
from rbdata.samplers._live import _LiveSet
from rbdata.storages import Storage
from rbdata.trajectories.reading import read_leaf

__all__ = ["StalenessAwareSampler"]


def _inverse_staleness(staleness: torch.Tensor) -> torch.Tensor:
    """The default weight (torchrl's): ``1 / (staleness + 1)``."""
    return 1.0 / (staleness.float() + 1.0)


class StalenessAwareSampler(Sampler):
    """Sample items in proportion to their freshness and leave out the stale ones.

    For asynchronous training (async PPO and the like): each stored item holds
    the version of the policy that collected it (``version_key``); the
    training loop sets :attr:`consumer_version` (the learner's version). An
    item's staleness is ``consumer_version - policy_version``; items with a
    staleness above ``max_staleness`` are never drawn, the others are drawn
    with replacement-when-needed in proportion to ``staleness_weight_fn``
    (default ``1 / (staleness + 1)``). ``info["staleness"]`` gives each drawn
    item's staleness.

    Args:
        max_staleness: the largest staleness drawn; ``-1`` (default): no bound.
        staleness_weight_fn: maps a staleness tensor to non-negative weights.
        version_key: the stored entry holding each item's policy version.
        replacement: accepted for torchrl compatibility: True changes nothing;
            False raises ``TypeError`` (this sampler has no without-replacement variant).

    Raises:
        TypeError: for a non-int ``max_staleness`` or a weight function that is
            not callable.
        ValueError: for ``max_staleness < -1``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, StalenessAwareSampler, TensorDictReplayBuffer
        >>> sampler = StalenessAwareSampler(max_staleness=1)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler)
        >>> _ = rb.extend(TensorDict({"policy_version": torch.tensor([0, 1, 2, 3])}, [4]))
        >>> sampler.consumer_version = 3
        >>> sorted(set(rb.sample(32)["policy_version"].tolist()))
        [2, 3]
    """

    def __init__(
        self,
        max_staleness: int = -1,
        staleness_weight_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        version_key: NestedKey = "policy_version",
        *,
        replacement: bool = True,
    ) -> None:
        super().__init__(replacement=replacement)
        self._max_staleness = check_int(max_staleness, "max_staleness", minimum=-1)
        if staleness_weight_fn is not None and not callable(staleness_weight_fn):
            raise TypeError(
                f"staleness_weight_fn must be callable, got {type(staleness_weight_fn).__name__}."
            )
        self._weight_fn = staleness_weight_fn or _inverse_staleness
        self._version_key = normalize_key(version_key)
        self._consumer_version = 0

    @property
    def consumer_version(self) -> int:
        """The learner's version staleness is measured from."""
        return self._consumer_version

    @consumer_version.setter
    def consumer_version(self, version: int) -> None:
        self._consumer_version = check_int(version, "consumer_version")

    def increment_consumer_version(self) -> None:
        """Add 1 to :attr:`consumer_version`."""
        self._consumer_version += 1

    @property
    def max_staleness(self) -> int:
        """The largest staleness drawn (-1: no bound)."""
        return self._max_staleness

    @max_staleness.setter
    def max_staleness(self, value: int) -> None:
        self._max_staleness = check_int(value, "max_staleness", minimum=-1)

    def set_consume_after_n(self, n: int | None) -> None:
        """Not supported (``n`` must be None): draws are weighted, with replacement."""
        if n is not None:
            raise ValueError(
                f"StalenessAwareSampler does not support consume_after_n_samples (got {n!r})."
            )
        super().set_consume_after_n(None)

    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(storage)
        try:
            versions = read_leaf(storage, self._version_key, torch.arange(n))
        except KeyError:
            raise KeyError(
                f"Could not find key {self._version_key!r} in the replay buffer storage: the "
                "items written must hold each one's policy version (e.g. a PolicyVersion "
                "transform on the environment)."
            ) from None
        if versions is None:
            raise KeyError(
                f"Could not find key {self._version_key!r} in the replay buffer storage."
            )
        staleness = self._consumer_version - versions.reshape(n, -1)[:, 0].float()
        if self._max_staleness >= 0:
            valid = (staleness <= self._max_staleness).nonzero().reshape(-1)
            if not valid.numel():
                raise RuntimeError(
                    f"All {n} entries in the buffer exceed max_staleness={self._max_staleness} "
                    f"(consumer_version={self._consumer_version}): raise max_staleness or "
                    "update the collectors' policy more often."
                )
        else:
            valid = torch.arange(n)
        weights = self._weight_fn(staleness[valid]).float()
        drawn = torch.multinomial(
            weights / weights.sum(),
            batch_size,
            replacement=batch_size > valid.numel(),
            generator=self._rng,
        )
        index = valid[drawn]
        return index, {"staleness": staleness[index]}

    def _on_empty(self) -> None:
        self._consumer_version = 0

    def _extra_state(self) -> dict[str, Any]:
        return {"consumer_version": self._consumer_version, "max_staleness": self._max_staleness}

    def _load_extra_state(self, state_dict: dict[str, Any]) -> None:
        version = check_int(
            state_dict.get("consumer_version", self._consumer_version), "consumer_version"
        )
        bound = check_int(
            state_dict.get("max_staleness", self._max_staleness), "max_staleness", minimum=-1
        )
        self._consumer_version, self._max_staleness = version, bound

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(consumer_version={self._consumer_version}, "
            f"max_staleness={self._max_staleness})"
        )
