"""What the dataset hands out: ReplayBatch, a TensorDict that survives torch's default conversion.

``torch.utils.data.DataLoader(ds, batch_size=None)`` passes every item through
``default_convert``, which treats a ``Mapping`` as ``{key: data[key] for key in
data}``. Iterating a TensorDict yields its *rows*, so a plain TensorDict batch
fails there. :class:`ReplayBatch` is a TensorDict whose iteration yields its
leaf keys (tuples for nested ones), as a Mapping's does; ``default_convert``
then rebuilds an equal ReplayBatch (same keys, same ``batch_size``, same
tensors) and pinning (``DataLoader(pin_memory=True)``) keeps working. The
fast paths (:mod:`rbdata.loader._tensordict_internals`, with their measurements)
make that round trip cost a few microseconds per key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils._pytree import tree_map
from torch.utils.data._utils.pin_memory import pin_memory as _torch_pin_memory

from rbdata.loader._tensordict_internals import leaf, leaf_keys, shallow_copy, wrap

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
        return iter(leaf_keys(self))

    def __getitem__(self, key: Any) -> Any:
        # Fast path for leaf keys (what default_convert asks for); the rest is TensorDict's.
        if type(key) is str or (type(key) is tuple and key):
            value = leaf(self, key)
            if value is not None:
                return value
        return super().__getitem__(key)

    def __copy__(self) -> ReplayBatch:
        """A shallow copy (new structure, same tensors), built without TensorDict's checks."""
        return shallow_copy(self)

    # Forwards every argument to TensorDict.update; tensordict's update signature is itself
    # incompatible with MutableMapping.update, so no override of it can match both.
    def update(  # type: ignore[override]
        self, input_dict_or_td: Any, *args: Any, **kwargs: Any
    ) -> ReplayBatch:
        """TensorDict's ``update``; writing back the very tensors already stored is a no-op."""
        if (
            type(input_dict_or_td) is dict
            and not args
            and not kwargs
            and all(leaf(self, k) is v for k, v in input_dict_or_td.items())
        ):
            return self
        return super().update(input_dict_or_td, *args, **kwargs)


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
    return wrap(ReplayBatch, data)


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
