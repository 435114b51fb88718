"""How OfflineToOnlineReplayBuffer splits and joins its two parts' draws and batches.

(And the checks of its arguments and of online data against the offline layout.)

A mixed draw is one ``(index, info)`` pair, as a single buffer's is: the
offline rows first, then the online rows; ``index`` and ``info["index"]``
hold each row's index *in its own part*, ``info[SOURCE_KEY]`` (bool ``[B]``)
tells the parts apart, and every other per-row info entry is concatenated,
the part that lacks it filled with 0 (1 for ``"priority_weight"``). Such a draw can
be kept (a ReplayDataset's pending batches, a checkpoint) and gathered later:
:func:`split_draw` gives each part its own ``(index, info)`` back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import check_number, check_optional_int
from rbdata._component.stateful import transaction
from rbdata.buffers._priority import check_priorities
from rbdata.buffers.protocol import INFO_KEYS
from rbdata.buffers.replay import ReplayBuffer
from rbdata.storages import Storage, TensorStorage

SOURCE_KEY = "is_offline"
"""The batch entry (bool ``[B]``) that is True for the rows drawn from the offline data."""

_FILL_ONES = frozenset({"priority_weight"})  # info entries a part lacks are filled with 1 (else 0)

Rows = tuple[torch.Tensor, dict[str, Any]]


def merge_draws(offline: Rows | None, online: Rows | None) -> Rows:
    """One mixed draw from each part's ``(index, info)`` (either may be None)."""
    parts = [(flag, draw) for flag, draw in ((True, offline), (False, online)) if draw is not None]
    index = torch.cat([draw[0] for _, draw in parts])
    source = torch.cat(
        [torch.full(draw[0].shape[:1], flag, dtype=torch.bool) for flag, draw in parts]
    )
    info: dict[str, Any] = {}
    keys = {key for _, (_, part) in parts for key, value in part.items() if _per_row(value, part)}
    for key in sorted(keys):
        ref = next(part[key] for _, (_, part) in parts if key in part)
        fill = torch.ones if key in _FILL_ONES else torch.zeros
        info[key] = torch.cat(
            [
                part[key]
                if key in part
                else fill(idx.shape[0], *ref.shape[1:], dtype=ref.dtype, device=ref.device)
                for _, (idx, part) in parts
            ]
        )
    info["index"] = index
    info[SOURCE_KEY] = source
    return index, info


def split_draw(index: torch.Tensor, info: dict[str, Any]) -> list[tuple[bool, Rows]]:
    """Each part's ``(offline?, (index, info))`` in a mixed draw, offline first."""
    source = info[SOURCE_KEY]
    parts: list[tuple[bool, Rows]] = []
    for offline, rows in ((True, source), (False, ~source)):
        if bool(rows.any()) or (not offline and not parts):  # an empty draw: online, empty
            sub = {
                key: value[rows]
                for key, value in info.items()
                if key != SOURCE_KEY and isinstance(value, torch.Tensor)
            }
            parts.append((offline, (index[rows], sub)))
    return parts


def _per_row(value: Any, info: dict[str, Any]) -> bool:
    index = info["index"]
    return isinstance(value, torch.Tensor) and value.shape[:1] == index.shape[:1]


def tag(batch: Any, offline: bool) -> TensorDictBase:
    """``batch`` with its ``SOURCE_KEY`` entry set (TypeError unless a TensorDict)."""
    if not isinstance(batch, TensorDictBase):
        raise TypeError(
            f"the {'offline' if offline else 'online'} part returned a "
            f"{type(batch).__name__}; both parts must hold TensorDicts."
        )
    batch.set(SOURCE_KEY, torch.full(batch.shape[:1], offline, dtype=torch.bool))
    return batch


def concat(offline: TensorDictBase, online: TensorDictBase) -> TensorDictBase:
    """The offline rows, then the online rows; KeyError if their entries differ."""
    for key in INFO_KEYS:
        have_off, have_on = key in offline.keys(), key in online.keys()
        if have_off != have_on:
            src, dst = (offline, online) if have_off else (online, offline)
            fill = torch.ones if key in _FILL_ONES else torch.zeros
            ref = src.get(key)
            dst.set(key, fill(dst.shape[0], *ref.shape[1:], dtype=ref.dtype))
    off_keys, on_keys = set(offline.keys(True, True)), set(online.keys(True, True))
    if off_keys != on_keys:
        raise KeyError(
            f"the offline and online samples have different entries: offline only "
            f"{sorted(map(str, off_keys - on_keys))}, online only "
            f"{sorted(map(str, on_keys - off_keys))}."
        )
    # torch types cat as returning a Tensor; TensorDicts dispatch it to their own cat
    return cast(TensorDictBase, torch.cat([offline, online], 0))


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
    expected = {as_tuple(key) for key in storage.leaf_keys()}
    given = {as_tuple(key) for key in batch.keys(True, True)}
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


def as_tuple(key: str | tuple[str, ...]) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def without_content(state: dict[str, Any]) -> dict[str, Any]:
    """A buffer state without its storage content (the offline data is not saved)."""
    return {key: value for key, value in state.items() if key not in ("storage", "_storage")}


def route_priority_update(
    parts: tuple[ReplayBuffer, ReplayBuffer],
    index: torch.Tensor | int,
    priority: torch.Tensor | float,
    generation: torch.Tensor | None,
    is_offline: torch.Tensor | None,
) -> None:
    """Update a mixed batch's priorities, each row in its part (``(offline, online)``).

    Every argument is checked before either part changes, and the two parts'
    samplers change together or not at all.

    Raises:
        ValueError: without ``is_offline``, for one of another length, or for
            a negative, NaN or infinite priority; nothing changes then.
    """
    offline, online = parts
    index = torch.as_tensor(index).reshape(-1)
    priority = check_priorities(priority)
    if priority.numel() == 1 and index.numel() != 1:
        priority = priority.expand(index.numel())
    if priority.numel() != index.numel():
        raise ValueError(
            f"priority has {priority.numel()} entries, expected one per index ({index.numel()})."
        )
    if is_offline is None:
        raise ValueError(
            "update_priority needs is_offline=batch['is_offline']: a mixed batch's index "
            "holds each row's index in its own part."
        )
    source = torch.as_tensor(is_offline, dtype=torch.bool).reshape(-1)
    if source.numel() != index.numel():
        raise ValueError(
            f"is_offline has {source.numel()} entries, expected one per index ({index.numel()})."
        )
    generation = None if generation is None else torch.as_tensor(generation).reshape(-1)
    todo = [(p, rows) for p, rows in ((offline, source), (online, ~source))]
    todo = [(p, rows) for p, rows in todo if p.prioritized and bool(rows.any())]
    with transaction(*(p.sampler for p, _ in todo)):  # both parts, or neither
        for part, rows in todo:
            part.update_priority(
                index[rows],
                priority[rows],
                generation=None if generation is None else generation[rows],
            )


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


def part_draw(part: ReplayBuffer, n: int) -> tuple[torch.Tensor, dict[str, Any]] | None:
    """``n`` rows drawn from one part (index and info); None for no rows."""
    if not n:
        return None
    draw = part.draw(n)
    return (draw.index, draw.info) if draw.index.numel() else None
