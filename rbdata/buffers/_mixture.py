"""How OfflineToOnlineReplayBuffer splits and joins its two parts' draws and batches.

:func:`draw_parts` draws each part's rows of one batch, :func:`merge_draws`
joins them into one draw, :func:`gather_mixed` has each part gather its own
rows and joins the batches (:func:`refilter_mixed` re-filters the online
rows of a batch drawn ahead); :func:`route_priority_update` sends a mixed
batch's priorities back to the parts. (The checks of the buffer's arguments
and of online data are in ``_mixture_checks``.)

A mixed draw is one ``(index, info)`` pair, as a single buffer's is: the
offline rows first, then the online rows; ``index`` and ``info["index"]``
hold each row's index *in its own part*, ``info[SOURCE_KEY]`` (bool ``[B]``)
tells the parts apart, and every other per-row info entry is concatenated,
the part that lacks it filled with 0 (1 for ``"priority_weight"``). Such a draw can
be kept (a ReplayDataset's pending batches, a checkpoint) and gathered later:
:func:`split_draw` gives each part its own ``(index, info)`` back.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import TensorDictBase

from rbdata._component.stateful import transaction
from rbdata.buffers._priority import check_priorities
from rbdata.buffers.protocol import INFO_KEYS, Draw
from rbdata.buffers.replay import ReplayBuffer

SOURCE_KEY = "is_offline"
"""The batch entry (bool ``[B]``) that is True for the rows drawn from the offline data."""

_FILL_ONES = frozenset({"priority_weight"})  # info entries a part lacks are filled with 1 (else 0)

Rows = tuple[torch.Tensor, dict[str, Any]]


def draw_parts(
    offline: ReplayBuffer, online: ReplayBuffer, batch_size: int, fraction: float
) -> tuple[Rows | None, Rows | None]:
    """Each part's rows of one batch: ``round(fraction * batch_size)`` offline, the rest online.

    While the online part is empty, every row is offline. A part gives None
    for no rows (it may give fewer than asked: consume-after-n, a row filter).

    Raises:
        RuntimeError: if offline rows are due and the offline part is empty.
    """
    n_offline = batch_size if len(online) == 0 else round(fraction * batch_size)
    if n_offline and len(offline) == 0:
        raise RuntimeError(f"cannot sample {n_offline} offline rows: the offline buffer is empty.")
    return _part_draw(offline, n_offline), _part_draw(online, batch_size - n_offline)


def _part_draw(part: ReplayBuffer, n: int) -> Rows | None:
    """``n`` rows drawn from one part (index and info); None for no rows."""
    if not n:
        return None
    draw = part.draw(n)
    return (draw.index, draw.info) if draw.index.numel() else None


def merge_draws(offline: Rows | None, online: Rows | None) -> Draw:
    """One mixed draw from each part's ``(index, info)`` (either may be None)."""
    if offline is None and online is None:
        return Draw.empty()
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
    return Draw(index, info)


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


def gather_mixed(offline: ReplayBuffer, online: ReplayBuffer, draw: Draw) -> TensorDictBase:
    """The batch of a mixed draw: each part gathers (and transforms) its own rows."""
    batches = []
    for from_offline, (rows, rows_info) in split_draw(draw.index, draw.info):
        part = offline if from_offline else online
        batches.append(tag(part.gather(Draw(rows, rows_info)), from_offline))
    return batches[0] if len(batches) == 1 else concat(*batches)


def refilter_mixed(online: ReplayBuffer, batch: TensorDictBase) -> TensorDictBase:
    """A mixed batch with the online row filters applied again to its online rows."""
    if not online.transform.filters_rows:
        return batch
    source = batch.get(SOURCE_KEY)
    kept = online.refilter(batch[~source])
    return concat(batch[source], kept) if bool(source.any()) else kept


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
