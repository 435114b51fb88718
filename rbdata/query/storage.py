"""Queries on a storage: :func:`run_query`, behind ``buffer.query``."""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rbdata._component.checks import NestedKey
from rbdata.query.context import candidate_keys
from rbdata.query.match import (
    Predicate,
    apply_steps,
    check_predicate,
    match_mask,
    matching,
    vectorizable,
)
from rbdata.query.plan import evaluation_plan
from rbdata.query.split import markers_of, split_storage, tensordict_keys
from rbdata.storages import Storage
from rbdata.trajectories.reading import get_items, read_leaf
from rbdata.trajectories.view import Trajectory

__all__ = ["run_query"]


def _read(storage: Storage, slots: torch.Tensor, keys: set[NestedKey] | None) -> TensorDictBase:
    """The entries ``keys`` (None: all) of the items at ``slots``, as a TensorDict."""
    if keys is None:
        items: TensorDictBase = get_items(storage, slots)
        return items
    data = TensorDict({}, batch_size=[slots.numel()])
    for key in keys:
        data.set(key, read_leaf(storage, key, slots))
    return data


def _extract(
    storage: Storage,
    order: torch.Tensor,
    starts: torch.Tensor,
    lengths: torch.Tensor,
    selected: torch.Tensor,
    steps: list[Any],
) -> list[Trajectory | None]:
    """The trajectories ``selected`` (positions in ``starts``), read in one gather.

    A trajectory whose rows the transform all dropped comes back as None.
    """
    if selected.numel() == 0:
        return []
    sel_lengths = lengths.index_select(0, selected)
    which = torch.repeat_interleave(sel_lengths)
    shift = starts.index_select(0, selected) - (torch.cumsum(sel_lengths, 0) - sel_lengths)
    rows = torch.arange(which.numel()) + shift[which]
    data, kept = apply_steps(steps, _read(storage, order.index_select(0, rows), None), rows)
    if kept is not rows:
        which = torch.searchsorted(starts, kept, right=True).sub_(1)
        which = torch.searchsorted(selected, which)
    counts = torch.bincount(which, minlength=selected.numel())
    nonempty = counts[counts > 0].tolist()
    parts = iter(Trajectory(data, order.index_select(0, kept)).split(nonempty) if nonempty else [])
    return [next(parts) if count else None for count in counts.tolist()]


def run_query(
    storage: Storage,
    *,
    transform: Callable[[TensorDictBase], TensorDictBase] | None = None,
    cursor: int = 0,
    predicate: Predicate | None = None,
    trajectory_key: NestedKey | None = None,
) -> list[Trajectory]:
    """Split ``storage`` into trajectories and return those matching ``predicate``.

    Trajectories are ordered oldest first: chronological order starts at slot 0,
    or at ``cursor`` once the storage is full (the oldest trajectory may then
    have lost its first transitions; one written across the wrap point is
    returned whole, in time order). Boundaries come from ``trajectory_key``
    ids, else the first stored of ``("collector", "traj_ids")``, ``"traj_ids"``
    and ``"episode"``, else done/terminated/truncated flags (under ``"next"``
    first, with a warning), computed on the stored (untransformed) data.

    A :class:`TrajectoryPredicate` that knows the entries it reads is
    evaluated on all trajectories at once, on those entries only, after the
    transforms that may change them (see :mod:`rbdata.query.plan`). Any other
    predicate sees the fully transformed trajectories. Matching trajectories
    are read in full with ``transform`` applied (rows a filtering transform
    drops are left out; trajectories left empty are not returned); they are
    copies, not views of the storage.

    Args:
        storage: a storage of TensorDict items; with ``ndim > 1`` trajectories are
            recovered per batch coordinate and grouped by coordinate.
        transform: applied to the data read (None or an empty Compose: none).
        cursor: the writer's cursor (the next item it writes).
        predicate: a TrajectoryPredicate, a callable ``Trajectory -> bool``, or
            None for every trajectory.
        trajectory_key: entry holding per-transition trajectory ids.

    Returns:
        The matching :class:`Trajectory` views (``index``: their storage slots),
        oldest first.

    Raises:
        TypeError: for a storage not holding TensorDicts, or a predicate that is
            not a condition on whole trajectories.
        KeyError: when ``trajectory_key`` (or any way to split) is not stored.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, traj
        >>> from rbdata.query import run_query
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(torch.arange(6), TensorDict(
        ...     {"episode": torch.tensor([0, 0, 0, 1, 1, 2]), "reward": torch.ones(6)}, [6]))
        >>> found = run_query(storage, predicate=traj.reward.sum() >= 2)
        >>> [t.episode.tolist() for t in found]
        [[0, 0, 0], [1, 1]]
    """
    check_predicate(predicate)
    if len(storage) == 0:
        return []
    if isinstance(transform, Sized) and len(transform) == 0:
        transform = None
    steps = [] if transform is None else [transform]
    keys = tensordict_keys(storage)
    markers = markers_of(keys, trajectory_key)
    order, starts, lengths = split_storage(storage, markers, cursor)
    vectorized = vectorizable(predicate)
    if vectorized is None:
        everything = torch.arange(starts.numel())
        return matching(predicate, _extract(storage, order, starts, lengths, everything, steps))
    condition, fields = vectorized
    plan, fetch = evaluation_plan(transform, candidate_keys(fields), keys)
    data, rows = apply_steps(plan, _read(storage, order, fetch), torch.arange(order.numel()))
    selected = match_mask(condition, data, rows, starts).nonzero().reshape(-1)
    return [t for t in _extract(storage, order, starts, lengths, selected, steps) if t is not None]
