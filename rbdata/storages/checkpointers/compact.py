"""FlatStorageCheckpointer: a TED storage saved in the flat form (TED2Flat / Flat2TED)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rbdata._component.checks import NestedKey

from .ted_flat import Flat2TED, TED2Flat
from .ted_nested import Nested2TED, TED2Nested
from .tensor import TensorStorageCheckpointer

__all__ = ["FlatStorageCheckpointer", "NestedStorageCheckpointer"]


def _ted_kwargs(
    done_keys: Iterable[NestedKey] | None, reward_keys: Iterable[NestedKey] | None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if done_keys is not None:
        kwargs["done_keys"] = done_keys
    if reward_keys is not None:
        kwargs["reward_keys"] = reward_keys
    return kwargs


class FlatStorageCheckpointer(TensorStorageCheckpointer):
    """Saves a TED storage in the flat form: each observation once (see :class:`~rbdata.TED2Flat`).

    A :class:`~rbdata.TensorStorageCheckpointer` whose save hook is
    ``TED2Flat`` and load hook ``Flat2TED``. As torchrl's, it assumes without
    checking that the root done flags are False and that ``("next", obs)`` of
    a step is ``obs`` of the next step of its trajectory.

    Args:
        done_keys: the done entries (default ``("done", "truncated", "terminated")``).
        reward_keys: the reward entries (default ``("reward",)``).

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata import FlatStorageCheckpointer, LazyTensorStorage, TensorDictReplayBuffer
        >>> def steps(start, n):
        ...     obs = torch.arange(start, start + n, dtype=torch.float32)
        ...     return TensorDict({"obs": obs, "done": torch.zeros(n, 1, dtype=torch.bool),
        ...         "next": {"obs": obs + 1, "done": (obs == 4)[:, None],
        ...                  "reward": torch.ones(n, 1)}}, batch_size=[n])
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(8), checkpointer=FlatStorageCheckpointer()
        ... )
        >>> _ = rb.extend(steps(0, 10))
        >>> copy = LazyTensorStorage(8)
        >>> copy.checkpointer = FlatStorageCheckpointer()
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     rb.storage.dumps(folder)
        ...     copy.loads(folder)
        >>> bool((copy.get(torch.arange(8)) == rb.storage.get(torch.arange(8))).all())
        True
    """

    def __init__(
        self,
        done_keys: Iterable[NestedKey] | None = None,
        reward_keys: Iterable[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        kwargs = _ted_kwargs(done_keys, reward_keys)
        self._save_hooks = [TED2Flat(**kwargs)]
        self._load_hooks = [Flat2TED(**kwargs)]


class NestedStorageCheckpointer(FlatStorageCheckpointer):
    """Saves a TED storage as one row per trajectory (:class:`~rbdata.TED2Nested`).

    The directory holds memory-mapped nested tensors (a ``<key>.memmap`` and a
    ``<key>.shape.memmap`` per entry), as torchrl's does. Same assumptions as
    :class:`~rbdata.FlatStorageCheckpointer`.

    Args:
        done_keys: the done entries (default ``("done", "truncated", "terminated")``).
        reward_keys: the reward entries (default ``("reward",)``).

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, NestedStorageCheckpointer
        >>> obs = torch.arange(6.0)
        >>> steps = TensorDict({"obs": obs, "next": {"obs": obs + 1, "reward": obs[:, None],
        ...     "done": (obs % 3 == 2)[:, None]}}, batch_size=[6])
        >>> storage = LazyTensorStorage(6)
        >>> storage.checkpointer = NestedStorageCheckpointer()
        >>> storage.set(torch.arange(6), steps)
        >>> copy = LazyTensorStorage(6)
        >>> copy.checkpointer = NestedStorageCheckpointer()
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage.dumps(folder)
        ...     copy.loads(folder)
        >>> copy.get(torch.arange(6))["next", "obs"].tolist()
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    """

    def __init__(
        self,
        done_keys: Iterable[NestedKey] | None = None,
        reward_keys: Iterable[NestedKey] | None = None,
    ) -> None:
        super().__init__(done_keys, reward_keys)
        kwargs = _ted_kwargs(done_keys, reward_keys)
        self._save_hooks = [TED2Nested(**kwargs)]
        self._load_hooks = [Nested2TED(**kwargs)]
