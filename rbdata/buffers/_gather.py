"""The read path of a buffer: what turns rows read from the storage into a sampled batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase, is_tensor_collection
from torch.utils._pytree import tree_map

from rbdata.transforms import Compose


def finish_batch(
    data: Any,
    index: torch.Tensor,
    info: Mapping[str, Any],
    *,
    collate_fn: Callable[[Any], Any],
    transform: Compose,
    keep_info: bool,
    pin: bool,
) -> Any:
    """Collate ``data`` (the rows of ``index``, flat), shape it like ``index``, run transforms.

    Args:
        data: what ``storage.get(index.reshape(-1))`` returned.
        index: the drawn rows (any shape: a ``[B, T]`` index gives a ``[B, T]`` batch).
        info: per-row tensors of the draw.
        collate_fn: merges what the storage returned (identity for tensor storages).
        transform: the sample-path transforms.
        keep_info: leave the info entries in a TensorDict batch (TensorDict buffers).
        pin: pin the batch's memory.

    Returns:
        The batch handed to the user.
    """
    data = collate_fn(data)
    if not keep_info and not pin and index.ndim == 1 and not len(transform):
        return data  # nothing to add, reshape or run: the common uniform batch
    if index.ndim > 1 and isinstance(data, torch.Tensor | TensorDictBase):
        data = (
            data.reshape(*index.shape, *data.shape[1:])
            if isinstance(data, torch.Tensor)
            else (data.reshape(*index.shape))
        )
    if isinstance(data, TensorDictBase) and transform.filters_rows:
        # Row filters drop rows: the info entries travel inside the batch so they stay aligned.
        data = transform(_with_info(data, index, info))
        if not keep_info:
            stored = data.keys(include_nested=True)
            data = data.exclude(*[key for key in info if key in stored])
        return _pinned(data) if pin else data
    if len(transform):
        data = transform(data)
    if isinstance(data, TensorDictBase) and keep_info:
        # after the transforms, as torchrl: they never see (nor change) the info entries
        data = _with_info(data, index, info)
    return _pinned(data) if pin else data


def _with_info(data: TensorDictBase, index: torch.Tensor, info: Mapping[str, Any]) -> Any:
    """``data`` with the per-row entries of ``info`` set (shaped like its batch)."""
    batch = data.batch_size
    for key, value in info.items():
        if isinstance(value, torch.Tensor) and value.shape[: index.ndim] == index.shape:
            if value.ndim < len(batch) and batch[: value.ndim] == value.shape:
                # items that are themselves batches (a list storage of [T] TensorDicts)
                value = value.reshape(*value.shape, *[1] * (len(batch) - value.ndim))
                value = value.expand(batch)
            data.set(key, value)
    return data


def _pinned(data: Any) -> Any:
    if isinstance(data, torch.Tensor) or is_tensor_collection(data):  # TensorDict, tensorclass
        return data.pin_memory()
    return tree_map(_pin, data)


def _pin(value: Any) -> Any:
    return value.pin_memory() if isinstance(value, torch.Tensor) else value
