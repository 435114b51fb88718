"""What the dataset hands out: ReplayBatch, a TensorDict that survives torch's default conversion.

``torch.utils.data.DataLoader(ds, batch_size=None)`` passes every item through
``default_convert``, which treats a ``Mapping`` as ``{key: data[key] for key in
data}``. Iterating a TensorDict yields its *rows*, so a plain TensorDict batch
fails there. :class:`ReplayBatch` is a TensorDict whose iteration yields its
leaf keys (tuples for nested ones), as a Mapping's does; ``default_convert``
then rebuilds an equal ReplayBatch (same keys, same ``batch_size``, same
tensors) and pinning (``DataLoader(pin_memory=True)``) keeps working. The
fast paths below make that round trip cost a few microseconds per key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils._pytree import tree_map
from torch.utils.data._utils.pin_memory import pin_memory as _torch_pin_memory

__all__ = ["ReplayBatch", "as_replay_batch", "place"]


class ReplayBatch(TensorDict):
    """A sampled batch: a TensorDict that iterates over its leaf keys, like a Mapping.

    Everything else is TensorDict's: indexing, ``batch_size``, ``.to()``,
    nested keys. Only ``iter(batch)`` differs: it yields the leaf keys (a
    tuple for a nested key) instead of the rows, so that
    ``DataLoader(ds, batch_size=None)``'s default conversion, which iterates a
    Mapping's keys, keeps the batch whole. Use ``batch.unbind(0)`` for rows.

    Examples:
        >>> import torch
        >>> from torch.utils.data import default_convert
        >>> from rbdata.loader import ReplayBatch
        >>> batch = ReplayBatch(
        ...     {"index": torch.arange(3), "next": {"reward": torch.ones(3, 1)}}, batch_size=[3]
        ... )
        >>> list(batch)
        ['index', ('next', 'reward')]
        >>> out = default_convert(batch)
        >>> type(out).__name__, out.batch_size, out["next", "reward"].shape
        ('ReplayBatch', torch.Size([3]), torch.Size([3, 1]))
    """

    # Iterating over leaf keys instead of rows is this class's purpose (see above): the
    # override changes TensorDict's element type on purpose.
    def __iter__(self) -> Iterator[str | tuple[str, ...]]:  # type: ignore[override]
        keys: list[str | tuple[str, ...]] = []
        _leaf_keys(self._tensordict, (), keys)
        return iter(keys)

    def __getitem__(self, key: Any) -> Any:
        # Fast path for leaf keys (what default_convert asks for); the rest is TensorDict's.
        if type(key) is str or (type(key) is tuple and key):
            value = _leaf(self._tensordict, key)
            if value is not None:
                return value
        return super().__getitem__(key)

    def __copy__(self) -> ReplayBatch:
        """A shallow copy (new structure, same tensors), built without TensorDict's checks."""
        return _shallow_copy(self)

    # Forwards every argument to TensorDict.update; tensordict's update signature is itself
    # incompatible with MutableMapping.update, so no override of it can match both.
    def update(  # type: ignore[override]
        self, input_dict_or_td: Any, *args: Any, **kwargs: Any
    ) -> ReplayBatch:
        """TensorDict's ``update``; writing back the very tensors already stored is a no-op."""
        if type(input_dict_or_td) is dict and not args and not kwargs:
            source = self._tensordict
            if all(_leaf(source, k) is v for k, v in input_dict_or_td.items()):
                return self
        return super().update(input_dict_or_td, *args, **kwargs)


_PLAIN_STATE = frozenset(("_tensordict", "_device", "_batch_size", "_td_dim_names"))


def _shallow_copy(td: TensorDict) -> TensorDict:
    """``td.copy()`` for a plain (unlocked, unnamed) TensorDict, built from its attributes.

    Anything else (a locked or named TensorDict, another tensordict version's
    attributes) takes TensorDict's own ``copy``.
    """
    state = td.__dict__
    source = state.get("_tensordict")
    if (
        state.keys() != _PLAIN_STATE
        or state["_td_dim_names"] is not None
        or type(source) is not dict
    ):
        return TensorDict.copy(td)
    new = object.__new__(type(td))
    new.__dict__.update(state)
    new._tensordict = {
        key: _shallow_copy(value) if type(value) is TensorDict else value
        for key, value in source.items()
    }
    return new


def _leaf_keys(source: dict[str, Any], prefix: tuple[str, ...], keys: list[Any]) -> None:
    for key, value in source.items():
        if isinstance(value, TensorDict):
            _leaf_keys(value._tensordict, (*prefix, key), keys)
        else:
            keys.append((*prefix, key) if prefix else key)


def _leaf(source: dict[str, Any], key: Any) -> torch.Tensor | None:
    """The tensor stored at ``key`` (str or tuple of str), or None for anything else."""
    if type(key) is tuple:
        for part in key[:-1]:
            sub = source.get(part) if type(part) is str else None
            if not isinstance(sub, TensorDict):
                return None
            source = sub._tensordict
        key = key[-1]
    if type(key) is not str:
        return None
    value = source.get(key)
    return value if isinstance(value, torch.Tensor) else None


def as_replay_batch(data: Any) -> Any:
    """Turn what the buffer gathered into the batch handed out.

    A TensorDict becomes a :class:`ReplayBatch` sharing its tensors (the
    buffer already put ``index`` & co. inside), so that it survives torch's
    default conversion; anything else (a tensor, a PyTree, collated Python
    objects) is handed out as the buffer's ``sample()`` returns it.

    Args:
        data: the gathered (and transformed) batch.

    Returns:
        A ReplayBatch, or ``data`` itself.
    """
    if type(data) is ReplayBatch or not isinstance(data, TensorDictBase):
        return data
    if not isinstance(data, TensorDict):
        data = data.to_tensordict()
    return ReplayBatch._new_unsafe(
        source=data._tensordict, batch_size=data.batch_size, device=data.device
    )


def place(batch: Any, pin: bool, device: torch.device | None) -> Any:
    """Pin ``batch`` (torch's own pinning) and copy it to ``device`` with ``non_blocking``."""
    if pin:
        batch = _torch_pin_memory(batch)
    if device is not None:
        if isinstance(batch, (torch.Tensor, TensorDictBase)):
            batch = batch.to(device, non_blocking=True)
        else:
            batch = tree_map(
                lambda t: t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t,
                batch,
            )
    return batch
