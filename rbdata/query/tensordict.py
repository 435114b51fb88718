"""Queries on a TensorDict of transitions: iter_trajectories and filter_trajectories."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key
from rbdata.query.context import candidate_keys
from rbdata.query.match import Predicate, check_predicate, match_mask, matching, vectorizable
from rbdata.query.split import split_data
from rbdata.trajectories.view import Trajectory

__all__ = ["filter_trajectories", "iter_trajectories"]


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
    starts, lengths = split_data(data, trajectory_key, "iter_trajectories")
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
    check_predicate(predicate)
    starts, lengths = split_data(data, trajectory_key, "filter_trajectories")
    spans = list(zip(starts.tolist(), lengths.tolist(), strict=True))
    vectorized = vectorizable(predicate)
    if vectorized is None:
        return matching(predicate, [_view(data, start, length) for start, length in spans])
    condition, fields = vectorized
    stored = {normalize_key(k) for k in data.keys(True, True)}
    columns = data.select(*(candidate_keys(fields) & stored))
    keep = match_mask(condition, columns, torch.arange(len(data)), starts)
    return [_view(data, *spans[i]) for i in keep.nonzero().reshape(-1).tolist()]
