"""Trajectory queries: :class:`Trajectory` views and ``run_query`` behind ``buffer.query``.

Predicates are built with :data:`traj` (see :mod:`rbdata._query_expr`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rbdata._query_expr import TrajectoryPredicate, _Context, _Expr, _resolve, traj
from rbdata._trajectories import (
    QUERY_TRAJ_KEYS,
    chronological_order,
    get_items,
    read_leaf,
    resolve_markers,
    split_storage,
    storage_keys,
)
from rbdata._validation import NestedKey, normalize_key

__all__ = ["Trajectory", "TrajectoryPredicate", "run_query", "traj"]

_ROW_KEY = "_rbdata_query_row"


class Trajectory:
    """The transitions of one stored trajectory, in time order.

    Attribute access reads an entry (``trajectory.observation``; a missing
    top-level key falls back to ``("next", key)``), ``trajectory[key]`` reads
    any entry, ``len()`` is the number of transitions, ``data`` / ``td`` the
    TensorDict and ``index`` the storage slots the transitions came from.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import Trajectory
        >>> t = Trajectory(TensorDict({"obs": torch.arange(3)}, [3]), torch.tensor([7, 8, 9]))
        >>> len(t), t.obs.tolist(), t.index.tolist()
        (3, [0, 1, 2], [7, 8, 9])
    """

    __slots__ = ("_data", "_index")

    def __init__(self, data: TensorDictBase, index: torch.Tensor) -> None:
        self._data, self._index = data, index

    @property
    def data(self) -> TensorDictBase:
        """The transitions as a TensorDict of batch size ``[len(self)]``."""
        return self._data

    td = data

    @property
    def index(self) -> torch.Tensor:
        """Storage slots of the transitions, in time order."""
        return self._index

    def __len__(self) -> int:
        return self._data.batch_size[0]

    def __getitem__(self, key: NestedKey) -> torch.Tensor:
        return self._data.get(normalize_key(key))

    def __getattr__(self, name: str) -> torch.Tensor:
        if name.startswith("_"):
            raise AttributeError(name)
        available = set(map(normalize_key, self._data.keys(True, True)))
        try:
            return self._data.get(_resolve(name, True, available))
        except KeyError as err:
            raise AttributeError(err.args[0]) from None

    def __repr__(self) -> str:
        return (
            f"Trajectory(length={len(self)}, keys={sorted(map(str, self._data.keys(True, True)))})"
        )


# ---------------------------------------------------------------- running a query
def _transform_keys(transform: Any, keys: set[NestedKey]) -> set[NestedKey]:
    """Entries the transform reads: its declared ``in_keys``, else every stored entry."""
    needed: set[NestedKey] = set()
    for t in getattr(transform, "transforms", [transform]):
        if hasattr(t, "transforms"):
            needed |= _transform_keys(t, keys)
            continue
        in_keys = getattr(t, "in_keys", None)
        if in_keys is None:
            return set(keys)
        needed |= {normalize_key(k) for k in in_keys}
    return needed & keys


def _read(storage: Any, slots: torch.Tensor, keys: set[NestedKey] | None) -> TensorDictBase:
    """The entries ``keys`` (None: all) of the items at ``slots``, as a TensorDict."""
    if keys is None:
        data = get_items(storage, slots)
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"query needs TensorDict items, got {type(data).__name__}.")
        return data
    data = TensorDict({}, batch_size=[slots.numel()])
    for key in keys:
        data.set(key, read_leaf(storage, key, slots))
    return data


def _apply(
    transform: Any, data: TensorDictBase, rows: torch.Tensor
) -> tuple[TensorDictBase, torch.Tensor]:
    """Run ``transform`` on ``data`` (time-ordered rows ``rows``); return it and the rows kept."""
    if transform is None:
        return data, rows
    data.set(_ROW_KEY, rows)
    out = transform(data)
    if not isinstance(out, TensorDictBase):
        raise TypeError(
            f"the buffer's transform returned {type(out).__name__}; query needs a TensorDict."
        )
    kept = out.get(_ROW_KEY, None)
    if kept is None:
        if out.batch_size[:1] != data.batch_size[:1]:
            raise RuntimeError(
                "the buffer's transform changed the number of rows and dropped the entries "
                "it was given, so the rows cannot be matched to their trajectories."
            )
        return out, rows
    return out.exclude(_ROW_KEY), kept


def _extract(
    storage: Any,
    order: torch.Tensor,
    starts: torch.Tensor,
    lengths: torch.Tensor,
    selected: torch.Tensor,
    transform: Any,
) -> list[Trajectory]:
    """The trajectories ``selected`` (positions in ``starts``), read in one gather."""
    if selected.numel() == 0:
        return []
    sel_lengths = lengths.index_select(0, selected)
    which = torch.repeat_interleave(sel_lengths)
    shift = starts.index_select(0, selected) - (torch.cumsum(sel_lengths, 0) - sel_lengths)
    rows = torch.arange(which.numel()) + shift[which]
    data, kept = _apply(transform, _read(storage, order.index_select(0, rows), None), rows)
    if kept is not rows:
        which = torch.searchsorted(starts, kept, right=True).sub_(1)
        which = torch.searchsorted(selected, which)
    counts = torch.bincount(which, minlength=selected.numel()).tolist()
    slots = order.index_select(0, kept)
    return [
        Trajectory(part, index)
        for part, index, count in zip(data.split(counts), slots.split(counts), counts, strict=True)
        if count
    ]


def run_query(
    storage: Any,
    *,
    transform: Callable[[TensorDictBase], TensorDictBase] | None = None,
    cursor: int = 0,
    predicate: Callable[[Trajectory], bool] | None = None,
    trajectory_key: NestedKey | None = None,
) -> list[Trajectory]:
    """Split ``storage`` into trajectories and return those matching ``predicate``.

    Trajectories are ordered oldest first: chronological order starts at slot 0,
    or at ``cursor`` once the storage is full (the oldest trajectory may then
    have lost its first transitions; one written across the wrap point is
    returned whole, in time order). Boundaries come from ``trajectory_key``
    ids, else the first stored of ``("collector", "traj_ids")``, ``"traj_ids"``
    and ``"episode"``, else done/terminated/truncated flags (under ``"next"``
    first), computed on the stored (untransformed) data.

    A :class:`TrajectoryPredicate` is evaluated on all trajectories at once on
    the entries it reads (plus the ones the transform declares as ``in_keys``;
    all entries for a transform without them), after the transform; any other
    callable gets each fully transformed :class:`Trajectory`. Matching
    trajectories are read in full with ``transform`` applied (rows a filtering
    transform drops are left out; trajectories left empty are not returned).

    Args:
        storage: a storage of TensorDict items; with ``ndim > 1`` trajectories are
            recovered per batch coordinate and grouped by coordinate.
        transform: applied to the data read (None or an empty Compose: none).
        cursor: the writer's cursor (the next item it writes).
        predicate: a TrajectoryPredicate, a callable ``Trajectory -> bool``, or
            None for every trajectory.
        trajectory_key: entry holding per-transition trajectory ids.

    Returns:
        The matching :class:`Trajectory` views, oldest first.

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
    if isinstance(predicate, _Expr) and not isinstance(predicate, TrajectoryPredicate):
        raise TypeError(
            f"{predicate!r} is not a condition on trajectories: compare it (e.g. "
            "traj.reward.sum() > 0) or reduce per-transition conditions with .any() / .all()."
        )
    if predicate is not None and not callable(predicate):
        raise TypeError(f"predicate must be callable or None, got {type(predicate).__name__}.")
    n = len(storage)
    if n == 0:
        return []
    if transform is not None and hasattr(transform, "__len__") and len(transform) == 0:
        transform = None
    keys = storage_keys(storage)
    markers = resolve_markers(
        keys,
        traj_key=None if trajectory_key is None else normalize_key(trajectory_key),
        end_key=None,
        traj_candidates=QUERY_TRAJ_KEYS,
    )
    order, group = chronological_order(storage, cursor)
    starts, lengths = split_storage(storage, order, markers, group)
    if predicate is None:
        return _extract(storage, order, starts, lengths, torch.arange(starts.numel()), transform)
    if not isinstance(predicate, TrajectoryPredicate):
        found = _extract(storage, order, starts, lengths, torch.arange(starts.numel()), transform)
        return [t for t in found if bool(predicate(t))]
    fetch = {_resolve(key, fallback, keys) for key, fallback in predicate._fields()}
    if transform is not None:
        fetch |= _transform_keys(transform, keys)
    data, rows = _apply(transform, _read(storage, order, fetch), torch.arange(order.numel()))
    segment = torch.searchsorted(starts, rows, right=True).sub_(1)
    ctx = _Context(data, segment, starts.numel())
    selected = (predicate._evaluate(ctx) & (ctx.lengths > 0)).nonzero().reshape(-1)
    return _extract(storage, order, starts, lengths, selected, transform)
