"""Which trajectories match a predicate: checking it, evaluating it on all at once.

A :class:`~rbdata.TrajectoryPredicate` that knows the entries it reads is
evaluated on all trajectories at once (:func:`match_mask`); any other callable is
called on each :class:`~rbdata.Trajectory`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey
from rbdata.query.context import EvalContext
from rbdata.query.expr import (
    Expr,
    TrajectoryPredicate,
    evaluate,
    fields_of,
    not_a_condition,
)
from rbdata.trajectories.view import Trajectory

__all__ = ["Predicate", "apply_steps", "check_predicate", "match_mask", "matching", "vectorizable"]

#: the entry carrying each row's position through the buffer's transforms
ROW_KEY = "_rbdata_query_row"
Predicate = Callable[[Trajectory], Any]


def check_predicate(predicate: Any) -> None:
    """Raise TypeError unless ``predicate`` is a condition, a callable or None."""
    if isinstance(predicate, Expr) and not isinstance(predicate, TrajectoryPredicate):
        raise not_a_condition(predicate)
    if predicate is not None and not callable(predicate):
        raise TypeError(
            f"predicate must be a TrajectoryPredicate, a callable or None, got "
            f"{type(predicate).__name__}."
        )


def vectorizable(
    predicate: Predicate | None,
) -> tuple[TrajectoryPredicate, set[tuple[NestedKey, bool]]] | None:
    """The predicate and the entries it reads, when it can be evaluated on those entries only."""
    if isinstance(predicate, TrajectoryPredicate):
        fields = fields_of(predicate)
        if fields is not None:
            return predicate, fields
    return None


def match_mask(
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


def apply_steps(
    steps: list[Any], data: TensorDictBase, rows: torch.Tensor
) -> tuple[TensorDictBase, torch.Tensor]:
    """Run ``steps`` on ``data`` (time-ordered rows ``rows``); return it and the rows kept."""
    if not steps:
        return data, rows
    data.set(ROW_KEY, rows)
    out = data
    for step in steps:
        out = step(out)
    if not isinstance(out, TensorDictBase):
        raise TypeError(
            f"the buffer's transform returned {type(out).__name__}; query needs a TensorDict."
        )
    kept = out.get(ROW_KEY, None)
    if kept is None:
        if out.batch_size[:1] != data.batch_size[:1]:
            raise RuntimeError(
                "the buffer's transform changed the number of rows and dropped the entries "
                "it was given, so the rows cannot be matched to their trajectories."
            )
        return out, rows
    return out.exclude(ROW_KEY), kept


def matching(predicate: Predicate | None, found: list[Trajectory | None]) -> list[Trajectory]:
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
    mask = match_mask(predicate, data, torch.arange(data.batch_size[0]), starts, views)
    return [t for t, keep in zip(present, mask.tolist(), strict=True) if keep]
