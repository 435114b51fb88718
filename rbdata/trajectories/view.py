"""The :class:`Trajectory` view: one trajectory's transitions, as a tensorclass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorClass, TensorDict, TensorDictBase

from rbdata._component.checks import NestedKey

__all__ = ["Trajectory"]


def _is_key(index: Any) -> bool:
    """Whether ``index`` names an entry (a str or a tuple of str) rather than rows."""
    if isinstance(index, str):
        return True
    return isinstance(index, tuple) and bool(index) and all(isinstance(p, str) for p in index)


# tensordict's stub declares TensorClass without the string options its runtime accepts.
class Trajectory(TensorClass["nocast"]):  # type: ignore[type-arg,name-defined]
    """The transitions of one trajectory, in time order (a tensorclass).

    ``data`` holds the transitions (batch size ``[T]``) and ``index`` where they
    came from: the storage slots for :meth:`ReplayBuffer.query
    <rbdata.ReplayBuffer.query>`, the rows of the input for
    :func:`~rbdata.iter_trajectories` (None when built by hand).

    Attribute access reads an entry of ``data``: ``trajectory.observation`` is
    ``data["observation"]``, and a name missing at the root falls back to
    ``("next", name)``, so ``trajectory.reward`` and ``trajectory.done`` are the
    post-step entries of the TED layout; :meth:`get` resolves keys the same way
    and ``trajectory[key]`` reads an exact entry. Being a tensorclass, indexing
    with rows (``trajectory[1:4]``, ``trajectory[0]``), ``clone()``, ``to()``,
    ``torch.stack`` and :func:`~tensordict.lazy_stack` (trajectories of
    different lengths) return a :class:`Trajectory`. The fields ``data`` and
    ``index`` (and tensorclass methods) take precedence over entries of the same
    name, which stay reachable with ``trajectory[name]``.

    Args:
        data: the transitions, a TensorDict with one batch dimension (the batch
            size is taken from it when ``batch_size`` is not given).
        index: where each transition came from (a ``[T]`` tensor), or None.

    Raises:
        TypeError: if ``data`` is not a TensorDict.
        ValueError: if ``data`` has more than one batch dimension and no
            ``batch_size`` is given.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict, lazy_stack
        >>> from rbdata import Trajectory
        >>> data = TensorDict({"obs": torch.arange(3), "next": {"reward": torch.ones(3)}}, [3])
        >>> t = Trajectory(data, torch.tensor([7, 8, 9]))
        >>> t.length, t.obs.tolist(), t.reward.tolist(), t.index.tolist()
        (3, [0, 1, 2], [1.0, 1.0, 1.0], [7, 8, 9])
        >>> t[1:]
        Trajectory(length=2, keys=['next', 'obs'])
        >>> lazy_stack([t, t[:1]]).batch_size
        torch.Size([2, -1])
    """

    data: TensorDictBase
    index: torch.Tensor | None = None

    def __post_init__(self) -> None:
        data = self.data
        if data is None:
            return
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"Trajectory data must be a TensorDict, got {type(data).__name__}.")
        if not self.batch_size and data.batch_dims:
            if data.batch_dims != 1:
                raise ValueError(
                    "Trajectory expects data with a single batch dimension (the time steps), "
                    f"got batch_size={tuple(data.batch_size)}."
                )
            self.batch_size = data.batch_size

    @property
    def length(self) -> int:
        """The number of transitions."""
        if not self.batch_size:
            raise IndexError("a Trajectory of batch_size=() (a single step) has no length.")
        return int(self.batch_size[0])

    @property
    def td(self) -> TensorDictBase:
        """Alias of ``data``."""
        return self.data

    @property
    def total_reward(self) -> torch.Tensor:
        """The sum of the rewards (``reward``, else ``("next", "reward")``)."""
        reward = self.get("reward")
        if reward is None:
            raise _no_entry(self, "reward")
        total: torch.Tensor = reward.sum()
        return total

    # Looks ``key`` up in ``data`` with a ("next", key) fallback: not TensorClass.get's
    # signature, on purpose.
    def get(self, key: NestedKey, default: Any = None) -> Any:  # type: ignore[override]
        """The entry ``key`` of ``data``, else ``("next", key)`` for a str key, else ``default``."""
        value = self.data.get(key, None)
        if value is None and isinstance(key, str):
            value = self.data.get(("next", key), None)
        return default if value is None else value

    def keys(self, *args: Any, **kwargs: Any) -> Any:
        """The keys of ``data`` (same arguments as ``TensorDict.keys``)."""
        return self.data.keys(*args, **kwargs)


def _no_entry(trajectory: Trajectory, name: str) -> AttributeError:
    stored = sorted(map(str, trajectory.data.keys(include_nested=True, leaves_only=True)))
    return AttributeError(
        f"Trajectory has no entry {name!r} in its data (nor {('next', name)!r}); "
        f"stored keys are {stored}."
    )


#: Names the tensorclass resolves itself (methods and properties of the TensorDict it wraps).
_TENSORDICT_NAMES = frozenset(dir(TensorDict)) | frozenset(dir(LazyStackedTensorDict))


def _with_entry_attributes(getattr_: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """Extend the tensorclass's attribute lookup with the entries of ``data``."""

    def lookup(self: Trajectory, name: str) -> Any:
        if name.startswith("_") or name in _TENSORDICT_NAMES:
            return getattr_(self, name)
        value = self.get(name)
        if value is None:
            raise _no_entry(self, name)
        return value

    return lookup


def _with_entry_keys(getitem: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """Extend the tensorclass's indexing: a key reads an entry of ``data``, rows slice it."""

    def index(self: Trajectory, item: Any) -> Any:
        return self.data[item] if _is_key(item) else getitem(self, item)

    return index


def _describe(self: Trajectory) -> str:
    shape = (
        f"length={self.length}"
        if len(self.batch_size) == 1
        else f"batch_size={tuple(self.batch_size)}"
    )
    keys = None if self.data is None else sorted(map(str, self.data.keys()))
    return f"Trajectory({shape}, keys={keys})"


# The tensorclass machinery installs its own lookup, indexing and repr when the class is
# created, so the entry-level behaviour is layered on top of them afterwards (tensordict's
# stub declares no __getattr__ and mypy forbids assigning to methods).
Trajectory.__getattr__ = _with_entry_attributes(Trajectory.__getattr__)  # type: ignore[attr-defined]
Trajectory.__getitem__ = _with_entry_keys(Trajectory.__getitem__)  # type: ignore[method-assign]
Trajectory.__repr__ = _describe  # type: ignore[method-assign,assignment]
