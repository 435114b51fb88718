"""The checks of OfflineToOnlineReplayBuffer's arguments and of what it is given later.

:func:`check_mixture_args` checks the constructor's arguments before anything
is built; :func:`fraction_at` the offline fraction of each batch (a constant,
or a schedule's value); :func:`check_online_data` the data written to the
online part against the offline layout; :func:`check_count` a saved
``batches_sampled``. Each raises TypeError for a wrong type and ValueError for
a wrong value (KeyError for entries that differ), naming the argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import check_number, check_optional_int, key_path
from rbdata.buffers._mixture import SOURCE_KEY
from rbdata.buffers.protocol import INFO_KEYS
from rbdata.buffers.replay import ReplayBuffer
from rbdata.storages import Storage, TensorStorage


def check_count(value: Any, name: str) -> int:
    """``value`` if it is an int >= 0 (a count of batches); ValueError naming ``name`` if not."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}.")
    return value


def check_mixture_args(
    offline: Any,
    online_storage: Any,
    online_capacity: Any,
    offline_fraction: Any,
    batch_size: Any,
    generator: Any,
) -> float | Callable[[int], float]:
    """Check :class:`~rbdata.OfflineToOnlineReplayBuffer`'s arguments; the checked fraction.

    Raises:
        TypeError: for an ``offline`` that is neither a TensorDict nor a ReplayBuffer,
            a non-numeric ``offline_fraction``, a bad ``online_storage`` or ``generator``.
        ValueError: for an empty offline TensorDict, an ``offline_fraction``
            outside ``[0, 1]``, a bad ``batch_size`` or ``online_capacity``, or
            when not exactly one of ``online_storage`` and ``online_capacity`` is given.
    """
    if isinstance(offline, TensorDictBase):
        if offline.batch_dims != 1 or offline.shape[0] == 0:
            raise ValueError(
                f"offline must be a non-empty TensorDict with one batch dimension, got "
                f"batch_size {list(offline.shape)}."
            )
    elif not isinstance(offline, ReplayBuffer):
        raise TypeError(
            f"offline must be a TensorDict or a ReplayBuffer holding the offline data, got "
            f"{type(offline).__name__}."
        )
    if (online_storage is None) == (online_capacity is None):
        given = "both" if online_storage is not None else "neither"
        raise ValueError(f"give exactly one of online_storage and online_capacity, got {given}.")
    check_optional_int(online_capacity, "online_capacity", minimum=1)
    if online_storage is not None and not isinstance(online_storage, Storage):
        raise TypeError(f"online_storage must be a Storage, got {type(online_storage).__name__}.")
    fraction: float | Callable[[int], float] = (
        offline_fraction
        if callable(offline_fraction)
        else check_fraction(offline_fraction, "offline_fraction")
    )
    check_optional_int(batch_size, "batch_size", minimum=1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}."
        )
    return fraction


def check_fraction(value: Any, what: str) -> float:
    """``value`` as a float in ``[0, 1]``; TypeError/ValueError naming ``what`` otherwise."""
    return check_number(value, what, minimum=0.0, maximum=1.0)


def fraction_at(fraction: float | Callable[[int], float], step: int) -> float:
    """The offline fraction of batch ``step``: the constant, or the schedule's checked value."""
    if not callable(fraction):
        return fraction
    return check_fraction(fraction(step), f"offline_fraction schedule's value for batch {step}")


def check_online_data(storage: Storage, data: Any, *, batched: bool) -> TensorDictBase:
    """``data`` without sample entries, checked against the offline ``storage``'s layout.

    Raises:
        TypeError: if ``data`` is not a TensorDict or an entry's dtype differs.
        KeyError: if the entries differ from the offline data's.
        ValueError: if an entry's per-item shape differs.
    """
    if not isinstance(data, TensorDictBase):
        raise TypeError(f"data must be a TensorDict, got {type(data).__name__}.")
    extra = [key for key in (*INFO_KEYS, SOURCE_KEY) if key in data.keys()]
    batch: TensorDictBase = data.exclude(*extra) if extra else data
    if not (isinstance(storage, TensorStorage) and storage.initialized):
        return batch
    expected = {key_path(key) for key in storage.leaf_keys()}
    given = {key_path(key) for key in batch.keys(True, True)}
    if given != expected:
        raise KeyError(
            f"online data must have the offline data's entries: missing "
            f"{sorted(expected - given)}, unexpected {sorted(given - expected)}."
        )
    for key in sorted(expected):
        stored, value = storage.get_leaf(key), batch.get(key)
        shape = tuple(value.shape[1:] if batched else value.shape)
        if shape != tuple(stored.shape[1:]):
            raise ValueError(
                f"online data entry {key} has per-item shape {list(shape)}; the offline "
                f"data has {list(stored.shape[1:])}."
            )
        if value.dtype != stored.dtype:
            raise TypeError(
                f"online data entry {key} has dtype {value.dtype}; the offline data has "
                f"{stored.dtype}."
            )
    return batch
