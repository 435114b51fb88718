"""Where a predicate is evaluated: the rows of many trajectories at once.

:class:`EvalContext` holds the rows of a set of trajectories and which
trajectory each row belongs to, so that :mod:`rbdata.query.expr` expressions
reduce per trajectory with one scatter (no Python loop over trajectories).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key
from rbdata.trajectories.view import Trajectory

__all__ = ["EvalContext", "candidate_keys", "resolve_key"]


def resolve_key(key: NestedKey, fallback: bool, available: Any) -> NestedKey:
    """``key`` if stored, else ``("next", key)`` when ``fallback`` (rewards live under next)."""
    if key in available:
        return key
    if fallback and isinstance(key, str) and ("next", key) in available:
        return ("next", key)
    also = f" nor ('next', {key!r})" if fallback else ""
    raise KeyError(
        f"no entry {key!r}{also} is stored; stored keys are {sorted(map(str, available))}."
    )


def candidate_keys(fields: set[tuple[NestedKey, bool]]) -> set[NestedKey]:
    """Every stored key ``fields`` may resolve to (``key``, and ``("next", key)`` on fallback)."""
    out: set[NestedKey] = set()
    for key, fallback in fields:
        out.add(key)
        if fallback and isinstance(key, str):
            out.add(("next", key))
    return out


class EvalContext:
    """The rows of a set of trajectories, for vectorized evaluation of a predicate.

    ``segment`` gives each row's trajectory; rows of one trajectory are
    consecutive. ``views`` are the trajectories as :class:`Trajectory` objects
    when the caller already has them (else they are cut from ``data`` on demand).
    """

    def __init__(
        self,
        data: TensorDictBase,
        segment: torch.Tensor,
        count: int,
        views: list[Trajectory | None] | None = None,
    ) -> None:
        self.data, self.segment, self.count = data, segment, count
        self._available = set(map(normalize_key, data.keys(True, True)))
        self._views = views
        self.lengths = torch.bincount(segment, minlength=count)
        rows = torch.arange(segment.numel())
        self.first_row = torch.zeros(count, dtype=torch.long).scatter_reduce_(
            0, segment, rows, "amin", include_self=False
        )
        self.last_row = torch.zeros(count, dtype=torch.long).scatter_reduce_(
            0, segment, rows, "amax", include_self=False
        )

    def column(self, key: NestedKey, fallback: bool) -> torch.Tensor:
        """The entry, on the CPU where the per-trajectory bookkeeping lives."""
        column: torch.Tensor = self.data.get(resolve_key(key, fallback, self._available))
        return column.cpu()

    def per_trajectory(self, rows: torch.Tensor, reduce: str) -> torch.Tensor:
        """Reduce per-row values ``rows`` to one per trajectory (``"sum"``, ``"amax"``...)."""
        out = torch.zeros(self.count, dtype=rows.dtype)
        return out.scatter_reduce_(0, self.segment, rows, reduce, include_self=False)

    def views(self) -> list[Trajectory | None]:
        """One :class:`Trajectory` per trajectory (None for one left without rows)."""
        if self._views is None:
            parts = self.data.split(self.lengths.tolist()) if self.count else []
            self._views = [Trajectory(part) if part.numel() else None for part in parts]
        return self._views
