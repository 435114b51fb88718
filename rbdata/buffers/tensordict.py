"""TensorDict buffers: samples carry ``index`` (and generations, weights)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata.buffers._priority_updates import check_priorities
from rbdata.buffers._write_path import WriteHooks
from rbdata.buffers.prioritized import (
    check_sync,
    prioritized_sampler_of,
    with_prioritized_sampler,
    writes_told,
)
from rbdata.buffers.protocol import INFO_KEYS
from rbdata.buffers.replay import ReplayBuffer
from rbdata.samplers import PrioritizedSampler
from rbdata.storages import Storage
from rbdata.storages._torchrl import without_index_entry
from rbdata.writers import TensorDictRoundRobinWriter

__all__ = ["TensorDictPrioritizedReplayBuffer", "TensorDictReplayBuffer"]


class TensorDictReplayBuffer(ReplayBuffer):
    """A replay buffer of TensorDicts whose samples carry ``index`` (and generations).

    Keyword Args:
        priority_key: the entry holding new priorities (used by prioritized subclasses).
        **kwargs: the :class:`ReplayBuffer` arguments; the default writer is
            :class:`TensorDictRoundRobinWriter`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
        >>> _ = rb.extend(TensorDict({"obs": torch.zeros(10, 3)}, batch_size=[10]))
        >>> sorted(rb.sample().keys())
        ['index', 'obs']
    """

    _default_writer = TensorDictRoundRobinWriter
    _keeps_info = True

    def __init__(self, *, priority_key: Any = "td_error", **kwargs: Any) -> None:
        self.priority_key = priority_key
        super().__init__(**kwargs)

    def _write_hooks(self) -> WriteHooks:
        return _WithoutInfo()

    def sample(
        self,
        batch_size: int | None = None,
        return_info: bool = False,
        include_info: bool | None = None,
    ) -> Any:
        """Sample a batch; its info entries (``index``, ...) are entries of the TensorDict.

        Args:
            batch_size: the number of items (default: the constructor's).
            return_info: also return the info dict.
            include_info: torchrl's deprecated argument; the info is always included.
        """
        if include_info is not None:
            warnings.warn(
                "include_info is deprecated: the sampled TensorDict always includes the info.",
                DeprecationWarning,
                stacklevel=2,
            )
        return super().sample(batch_size, return_info)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state (see :meth:`ReplayBuffer.load_state_dict`); torchrl's too.

        A torchrl TensorDict buffer's state holds each row's ``"index"``; it is left out.
        """
        super().load_state_dict(without_index_entry(state_dict))

    def update_priority(
        self,
        index: Any,
        priority: torch.Tensor | float | None = None,
        *,
        generation: torch.Tensor | None = None,
    ) -> None:
        """Update priorities: ``(index, priority)``, or a sampled batch alone (an extension).

        ``update_priority(batch)`` with one argument, a TensorDict sampled from
        this buffer, does what :meth:`update_tensordict_priority` does (torchrl's
        SAC and TD3 scripts call it so; torchrl 0.14.1 raises TypeError there).

        Raises:
            TypeError: if ``priority`` is missing and ``index`` is not a TensorDict,
                or ``generation`` is given with a TensorDict.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
            >>> rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0,
            ...     storage=LazyTensorStorage(4), batch_size=2)
            >>> _ = rb.extend(TensorDict({"obs": torch.zeros(4)}, [4]))
            >>> batch = rb.sample().set("td_error", torch.full((2,), 3.0))
            >>> rb.update_priority(batch)
        """
        if priority is not None:
            super().update_priority(index, priority, generation=generation)
            return
        if not isinstance(index, TensorDictBase) or generation is not None:
            raise TypeError(
                "update_priority takes (index, priority) or one sampled TensorDict, got "
                f"{type(index).__name__} without a priority"
                f"{' and a generation' if generation is not None else ''}."
            )
        self.update_tensordict_priority(index)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update priorities from a sampled batch (``index``, ``priority_key``, generations).

        With a :class:`~rbdata.Sequence` unit the records' priorities go to
        their anchors (``anchor_index``): the max over each window's valid records.
        A batch without ``priority_key`` gives its rows the sampler's
        ``default_priority`` (torchrl's behaviour).
        """
        components = self._components
        components.init()
        index = components.flat_index(data.get("index"), 'data["index"]')
        priority = data.get(self.priority_key, None)
        if priority is None:  # an unprioritized sampler warns and ignores the update
            sampler = components.sampler
            default = sampler.default_priority if isinstance(sampler, PrioritizedSampler) else 1.0
            priority = torch.full(index.shape, float(default), dtype=torch.float)
        if priority.ndim > index.ndim:
            priority = priority.reshape(*index.shape, -1).amax(-1)
        self._priorities.update_record_priority(
            data, index, priority, data.get("index_generation", None), self.update_priority
        )


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """A prioritized buffer of TensorDicts; samples carry ``index`` and ``priority_weight``.

    Keyword Args:
        alpha: the priority exponent.
        beta: the importance-weight exponent.
        priority_key: entry read by ``extend`` and :meth:`update_tensordict_priority`.
        eps: added to priorities.
        dtype: dtype of the priority tree.
        reduction: how duplicate indices in one priority update combine.
        sampler_device: where the priority tree lives (None: the storage's device).
        sync: False lets writer processes started with the buffer write without
            the priority tree (see :class:`PrioritizedReplayBuffer`). Defaults to True.
        **kwargs: the :class:`ReplayBuffer` arguments (except ``sampler``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
        >>> rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5,
        ...     storage=LazyTensorStorage(10), batch_size=4)
        >>> _ = rb.extend(TensorDict({"obs": torch.zeros(10, 3)}, [10]))
        >>> batch = rb.sample()
        >>> batch.set("td_error", torch.rand(4)).get("priority_weight").shape
        torch.Size([4])
        >>> rb.update_tensordict_priority(batch)
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        priority_key: Any = "td_error",
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        reduction: str = "max",
        sampler_device: torch.device | str | None = None,
        sync: bool = True,
        **kwargs: Any,
    ) -> None:
        storage, kwargs = with_prioritized_sampler(
            type(self).__name__,
            kwargs,
            storage,
            sampler_device,
            alpha=alpha,
            beta=beta,
            eps=eps,
            dtype=dtype,
            reduction=reduction,
        )
        sync = check_sync(type(self).__name__, sync, storage)
        super().__init__(priority_key=priority_key, storage=storage, **kwargs)
        self._components.sync_priorities = sync

    @property
    def prioritized_sampler(self) -> PrioritizedSampler:
        """The sampler that owns the priority tree (RuntimeError in a ``sync=False`` writer)."""
        return prioritized_sampler_of(self)

    @property
    def _prioritized_sampler_write_count(self) -> int:
        """The writes (by any process) the priority tree was told about."""
        return writes_told(self._components)

    def _write_hooks(self) -> WriteHooks:
        return _PriorityEntry(self)


class _WithoutInfo(WriteHooks):
    """A sampled batch written back loses its sampling info (``index`` & co.)."""

    def prepare(self, data: Any) -> Any:
        if isinstance(data, TensorDictBase):
            keys = data.keys()
            stale = [k for k in INFO_KEYS if k in keys]
            if stale:
                data = data.exclude(*stale)
        return data


class _PriorityEntry(_WithoutInfo):
    """Priorities read from the written data's ``priority_key`` entry (checked before the write)."""

    def __init__(self, buffer: TensorDictPrioritizedReplayBuffer) -> None:
        self.buffer = buffer

    def _data_priority(self, data: Any, update_priority: bool | None) -> torch.Tensor | None:
        """One priority per written item, read from ``priority_key`` (None: none given)."""
        if update_priority is False or not isinstance(data, TensorDictBase):
            return None
        key = self.buffer.priority_key
        priority = data.get(key, None)
        if priority is None:
            return None
        # one per written cell: the storage dims lead (``extend`` moved dim_extend first)
        n = math.prod(data.shape[: self.buffer.storage.ndim]) if data.batch_dims else 1
        return check_priorities(priority.reshape(n, -1).amax(-1), key)

    def validate(self, data: Any, update_priority: bool | None) -> None:
        """Refuse NaN, infinite or negative priorities before anything is written."""
        self._data_priority(data, update_priority)

    def after(self, data: Any, index: torch.Tensor, update_priority: bool | None) -> None:
        priority = self._data_priority(data, update_priority)
        if priority is None or not isinstance(self.buffer.sampler, PrioritizedSampler):
            return  # a sync=False writer process: the learner sets the priorities
        keep = index >= 0
        self.buffer.update_priority(index[keep], priority[keep])
