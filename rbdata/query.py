"""Trajectory queries: ``run_query`` behind ``buffer.query``, and the same split on a TensorDict.

:func:`iter_trajectories` and :func:`filter_trajectories` split a TensorDict of
transitions into :class:`~rbdata.Trajectory` views; :func:`run_query` does it
for a whole storage (following the wrap point) with the buffer's transforms.
Predicates are built with :data:`~rbdata.traj` (see :mod:`rbdata._query_expr`)
and evaluated on all trajectories at once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key
from rbdata._query_expr import (
    EvalContext,
    Expr,
    TrajectoryPredicate,
    candidate_keys,
    evaluate,
    fields_of,
    not_a_condition,
    traj,
)
from rbdata._query_plan import evaluation_plan
from rbdata._trajectories import (
    QUERY_TRAJ_KEYS,
    Markers,
    break_positions,
    chronological_order,
    get_items,
    read_leaf,
    resolve_markers,
    segment_lengths,
    split_storage,
    storage_keys,
)
from rbdata.trajectory import Trajectory

__all__ = [
    "Trajectory",
    "TrajectoryPredicate",
    "filter_trajectories",
    "iter_trajectories",
    "run_query",
    "traj",
]

_ROW_KEY = "_rbdata_query_row"
Predicate = Callable[[Trajectory], Any]


# ---------------------------------------------------------------- splitting
def _check_predicate(predicate: Any) -> None:
    if isinstance(predicate, Expr) and not isinstance(predicate, TrajectoryPredicate):
        raise not_a_condition(predicate)
    if predicate is not None and not callable(predicate):
        raise TypeError(
            f"predicate must be a TrajectoryPredicate, a callable or None, got "
            f"{type(predicate).__name__}."
        )


def _markers(keys: set[NestedKey], trajectory_key: NestedKey | None) -> Markers:
    """What splits transitions into trajectories; warns when it falls back to end flags."""
    if trajectory_key is not None:
        key = normalize_key(trajectory_key, "trajectory_key")
        if key not in keys:
            raise KeyError(
                f"trajectory_key {key!r} is not stored; stored keys are {sorted(map(str, keys))}."
            )
        return Markers("ids", (key,))
    try:
        markers = resolve_markers(
            keys, traj_key=None, end_key=None, traj_candidates=QUERY_TRAJ_KEYS
        )
    except KeyError:
        raise KeyError(
            "Cannot split data into trajectories: no trajectory id entry "
            f"({', '.join(map(repr, QUERY_TRAJ_KEYS))}) nor done/terminated/truncated flag "
            f"is stored (stored keys: {sorted(map(str, keys))}); pass trajectory_key."
        ) from None
    if markers.kind == "ends":
        warnings.warn(
            f"no trajectory id entry is stored: splitting on the end-of-episode flags "
            f"{markers.keys}. A trajectory whose last transition has no end flag is merged "
            "with the next one; store trajectory ids (e.g. ('collector', 'traj_ids')) or "
            "pass trajectory_key.",
            UserWarning,
            stacklevel=4,
        )
    return markers


def _tensordict_keys(storage: Any) -> set[NestedKey]:
    """The stored entries; a storage of anything but single TensorDict transitions raises."""
    try:
        keys = storage_keys(storage)
    except TypeError as err:
        raise TypeError(f"query needs a tensordict-backed storage: {err}") from None
    if not hasattr(storage, "leaf_keys"):
        first = get_items(storage, torch.zeros(1, dtype=torch.long))
        if first.batch_dims > 1:
            raise TypeError(
                "query on a list storage expects single-transition items (batch_size=[]), "
                f"got items of batch_size={list(first.batch_size[1:])}."
            )
    return keys


class _Rows:
    """A TensorDict of transitions read like a storage's leaves (what :class:`Markers` reads)."""

    def __init__(self, data: TensorDictBase) -> None:
        self._data = data

    def get_leaf(self, key: NestedKey) -> torch.Tensor:
        leaf: torch.Tensor = self._data.get(key)
        return leaf


def _split_data(
    data: Any, trajectory_key: NestedKey | None, caller: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(starts, lengths)`` of the trajectories of a flat TensorDict of transitions."""
    if not isinstance(data, TensorDictBase):
        raise TypeError(
            f"{caller} expects a TensorDictBase of transitions, got {type(data).__name__}."
        )
    if data.batch_dims != 1:
        raise ValueError(
            f"{caller} expects data with a single batch dimension (flat transitions), got "
            f"batch_size={list(data.batch_size)}."
        )
    n = int(data.batch_size[0])
    if n == 0:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    markers = _markers({normalize_key(k) for k in data.keys(True, True)}, trajectory_key)
    starts = break_positions(markers.read(_Rows(data), torch.arange(n)).numpy(), markers.kind, None)
    return torch.from_numpy(starts), torch.from_numpy(segment_lengths(starts, n))


# ---------------------------------------------------------------- evaluation
def _mask(
    predicate: TrajectoryPredicate,
    data: TensorDictBase,
    rows: torch.Tensor,
    starts: torch.Tensor,
    views: list[Trajectory | None] | None = None,
) -> torch.Tensor:
    """Which trajectories (starting at ``starts``) match, given their rows ``rows`` of ``data``."""
    segment = torch.searchsorted(starts, rows, right=True).sub_(1)
    ctx = EvalContext(data, segment, starts.numel(), views)
    return evaluate(predicate, ctx) & (ctx.lengths > 0)


def _apply(
    steps: list[Any], data: TensorDictBase, rows: torch.Tensor
) -> tuple[TensorDictBase, torch.Tensor]:
    """Run ``steps`` on ``data`` (time-ordered rows ``rows``); return it and the rows kept."""
    if not steps:
        return data, rows
    data.set(_ROW_KEY, rows)
    out = data
    for step in steps:
        out = step(out)
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


# ---------------------------------------------------------------- reading a storage
def _read(storage: Any, slots: torch.Tensor, keys: set[NestedKey] | None) -> TensorDictBase:
    """The entries ``keys`` (None: all) of the items at ``slots``, as a TensorDict."""
    if keys is None:
        items: TensorDictBase = get_items(storage, slots)
        return items
    data = TensorDict({}, batch_size=[slots.numel()])
    for key in keys:
        data.set(key, read_leaf(storage, key, slots))
    return data


def _extract(
    storage: Any,
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
    data, kept = _apply(steps, _read(storage, order.index_select(0, rows), None), rows)
    if kept is not rows:
        which = torch.searchsorted(starts, kept, right=True).sub_(1)
        which = torch.searchsorted(selected, which)
    counts = torch.bincount(which, minlength=selected.numel())
    nonempty = counts[counts > 0].tolist()
    parts = iter(Trajectory(data, order.index_select(0, kept)).split(nonempty) if nonempty else [])
    return [next(parts) if count else None for count in counts.tolist()]


def run_query(
    storage: Any,
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
    transforms that may change them (see :mod:`rbdata._query_plan`). Any other
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
    _check_predicate(predicate)
    if len(storage) == 0:
        return []
    if transform is not None and hasattr(transform, "__len__") and len(transform) == 0:
        transform = None
    steps = [] if transform is None else [transform]
    keys = _tensordict_keys(storage)
    markers = _markers(keys, trajectory_key)
    order, group = chronological_order(storage, cursor)
    starts, lengths = split_storage(storage, order, markers, group)
    vectorized = _vectorized(predicate)
    if vectorized is None:
        everything = torch.arange(starts.numel())
        return _matching(predicate, _extract(storage, order, starts, lengths, everything, steps))
    condition, fields = vectorized
    plan, fetch = evaluation_plan(transform, candidate_keys(fields), keys)
    data, rows = _apply(plan, _read(storage, order, fetch), torch.arange(order.numel()))
    selected = _mask(condition, data, rows, starts).nonzero().reshape(-1)
    return [t for t in _extract(storage, order, starts, lengths, selected, steps) if t is not None]


def _vectorized(
    predicate: Predicate | None,
) -> tuple[TrajectoryPredicate, set[tuple[NestedKey, bool]]] | None:
    """The predicate and the entries it reads, when it can be evaluated on those entries only."""
    if isinstance(predicate, TrajectoryPredicate):
        fields = fields_of(predicate)
        if fields is not None:
            return predicate, fields
    return None


def _matching(predicate: Predicate | None, found: list[Trajectory | None]) -> list[Trajectory]:
    """The trajectories of ``found`` (already read in full; None: none left) that match."""
    present = [t for t in found if t is not None]
    if predicate is None or not present:
        return present
    if not isinstance(predicate, TrajectoryPredicate):
        return [t for t in present if bool(predicate(t))]
    data = cast(TensorDictBase, torch.cat([t.data for t in present]))
    counts = torch.tensor([t.length for t in present])
    starts = torch.cumsum(counts, 0) - counts
    views: list[Trajectory | None] = list(present)
    mask = _mask(predicate, data, torch.arange(data.batch_size[0]), starts, views)
    return [t for t, keep in zip(present, mask.tolist(), strict=True) if keep]


# ---------------------------------------------------------------- TensorDict helpers
def _view(data: TensorDictBase, start: int, length: int) -> Trajectory:
    stop = start + length
    return Trajectory(data[start:stop], torch.arange(start, stop))


def iter_trajectories(
    data: TensorDictBase, trajectory_key: NestedKey | None = None
) -> Iterator[Trajectory]:
    """Iterate over the trajectories of a flat TensorDict of transitions.

    Consecutive transitions form a trajectory; boundaries come from
    ``trajectory_key`` ids, else the first stored of ``("collector",
    "traj_ids")``, ``"traj_ids"`` and ``"episode"``, else the union of the
    done/terminated/truncated flags (under ``"next"`` first; with a
    ``UserWarning``, since a trajectory whose last step carries no flag merges
    with the next one). The last transition always ends a trajectory.

    Args:
        data: transitions, a TensorDict with one batch dimension.
        trajectory_key: the entry holding per-transition trajectory ids.

    Yields:
        :class:`Trajectory` views (slices of ``data``; ``index``: their rows).

    Raises:
        TypeError: if ``data`` is not a TensorDict.
        ValueError: if it has more than one batch dimension.
        KeyError: if ``trajectory_key`` (or any way to split) is not stored.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import iter_trajectories
        >>> data = TensorDict({"episode": torch.tensor([4, 4, 5, 5, 5])}, [5])
        >>> [t.length for t in iter_trajectories(data)]
        [2, 3]
    """
    starts, lengths = _split_data(data, trajectory_key, "iter_trajectories")
    for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
        yield _view(data, start, length)


def filter_trajectories(
    data: TensorDictBase,
    predicate: Predicate | None = None,
    *,
    trajectory_key: NestedKey | None = None,
) -> list[Trajectory]:
    """Split ``data`` into trajectories (as :func:`iter_trajectories`) and keep the matching ones.

    A :class:`TrajectoryPredicate` built from :data:`traj` is evaluated on
    all trajectories at once; any other callable is called on each
    :class:`Trajectory`.

    Args:
        data: transitions, a TensorDict with one batch dimension.
        predicate: a TrajectoryPredicate, a callable ``Trajectory -> bool``, or
            None (keep every trajectory).
        trajectory_key: the entry holding per-transition trajectory ids.

    Returns:
        The matching :class:`Trajectory` views, in order.

    Raises:
        TypeError: if ``data`` is not a TensorDict, or for a predicate that is
            not a condition on whole trajectories (e.g. ``traj.reward > 0``
            without ``.any()`` / ``.all()``).
        ValueError: if ``data`` has more than one batch dimension.
        KeyError: if ``trajectory_key`` (or any way to split) is not stored.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import filter_trajectories, traj
        >>> data = TensorDict(
        ...     {"episode": torch.tensor([0, 0, 1, 1, 1]), "reward": torch.arange(5.0)}, [5])
        >>> [t.reward.tolist() for t in filter_trajectories(data, traj.reward.sum() > 3)]
        [[2.0, 3.0, 4.0]]
    """
    _check_predicate(predicate)
    starts, lengths = _split_data(data, trajectory_key, "filter_trajectories")
    spans = list(zip(starts.tolist(), lengths.tolist(), strict=True))
    vectorized = _vectorized(predicate)
    if vectorized is None:
        return _matching(predicate, [_view(data, start, length) for start, length in spans])
    condition, fields = vectorized
    stored = {normalize_key(k) for k in data.keys(True, True)}
    columns = data.select(*(candidate_keys(fields) & stored))
    keep = _mask(condition, columns, torch.arange(len(data)), starts)
    return [_view(data, *spans[i]) for i in keep.nonzero().reshape(-1).tolist()]
