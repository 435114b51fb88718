"""The query language: ``traj`` builds :class:`TrajectoryPredicate` expressions.

``traj.reward.sum() > 100`` is evaluated on all stored trajectories at once
(segment reductions over the transitions, no Python loop over trajectories)
and knows which entries it reads, so a query fetches only those.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata._validation import NestedKey, normalize_key

_SYMBOLS = {
    operator.gt: ">",
    operator.ge: ">=",
    operator.lt: "<",
    operator.le: "<=",
    operator.eq: "==",
    operator.ne: "!=",
}


def _resolve(key: NestedKey, fallback: bool, available: Any) -> NestedKey:
    """``key`` if stored, else ``("next", key)`` when ``fallback`` (rewards live under next)."""
    if key in available:
        return key
    if fallback and ("next", key) in available:
        return ("next", key)
    also = f" nor ('next', {key!r})" if fallback else ""
    raise KeyError(
        f"no entry {key!r}{also} is stored; stored keys are {sorted(map(str, available))}."
    )


class _Context:
    """The rows of a set of trajectories, for vectorized evaluation of a predicate."""

    def __init__(self, data: TensorDictBase, segment: torch.Tensor, count: int) -> None:
        self.data, self.segment, self.count = data, segment, count
        self._available = set(map(normalize_key, data.keys(True, True)))
        self.lengths = torch.bincount(segment, minlength=count)
        rows = torch.arange(segment.numel())
        self.first_row = torch.zeros(count, dtype=torch.long).scatter_reduce_(
            0, segment, rows, "amin", include_self=False
        )
        self.last_row = torch.zeros(count, dtype=torch.long).scatter_reduce_(
            0, segment, rows, "amax", include_self=False
        )

    def column(self, key: NestedKey, fallback: bool) -> torch.Tensor:
        return self.data.get(_resolve(key, fallback, self._available))

    def per_trajectory(self, rows: torch.Tensor, reduce: str) -> torch.Tensor:
        out = torch.zeros(self.count, dtype=rows.dtype)
        return out.scatter_reduce_(0, self.segment, rows, reduce, include_self=False)


class _Expr:
    """A node of a query: per-transition (``row``) or per-trajectory (``traj``) values."""

    level = "traj"

    def _evaluate(self, ctx: _Context) -> torch.Tensor:
        raise NotImplementedError

    def _fields(self) -> set[tuple[NestedKey, bool]]:
        return set()

    def required_keys(self) -> set[NestedKey]:
        """The entries this expression reads.

        Keys are given as written: ``traj.reward`` reads ``"reward"``, or
        ``("next", "reward")`` when only the latter is stored.
        """
        return {key for key, _ in self._fields()}

    def _compare(self, other: Any, op: Callable) -> _Expr:
        if isinstance(other, _Expr) and "row" in (self.level, other.level):
            return _RowCompare(op, self, other)
        if self.level == "row":
            return _RowCompare(op, self, other)
        return TrajectoryPredicate(_Compare(op, self, other))

    def __gt__(self, other: Any) -> _Expr:
        return self._compare(other, operator.gt)

    def __ge__(self, other: Any) -> _Expr:
        return self._compare(other, operator.ge)

    def __lt__(self, other: Any) -> _Expr:
        return self._compare(other, operator.lt)

    def __le__(self, other: Any) -> _Expr:
        return self._compare(other, operator.le)

    def __eq__(self, other: Any) -> _Expr:  # type: ignore[override]
        return self._compare(other, operator.eq)

    def __ne__(self, other: Any) -> _Expr:  # type: ignore[override]
        return self._compare(other, operator.ne)

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise TypeError(
            f"{self!r} is a query expression, not a bool: combine conditions with &, | and ~ "
            "(not 'and', 'or', 'not') and pass the result to query()."
        )


def _rows_of(value: Any, ctx: _Context) -> Any:
    if not isinstance(value, _Expr):
        return value
    out = value._evaluate(ctx)
    return out if value.level == "row" else out[ctx.segment]


def _fields_of(*values: Any) -> set[tuple[NestedKey, bool]]:
    out: set[tuple[NestedKey, bool]] = set()
    for value in values:
        if isinstance(value, _Expr):
            out |= value._fields()
    return out


class _RowExpr(_Expr):
    """Per-transition values; reduce them to one value per trajectory."""

    level = "row"

    def _reduce(self, how: str) -> _Reduce:
        return _Reduce(how, self)

    def sum(self) -> _Reduce:
        """Sum over the trajectory (all elements of each transition)."""
        return self._reduce("sum")

    def mean(self) -> _Reduce:
        """Mean over the trajectory (all elements of each transition)."""
        return self._reduce("mean")

    def max(self) -> _Reduce:
        """Maximum over the trajectory."""
        return self._reduce("max")

    def min(self) -> _Reduce:
        """Minimum over the trajectory."""
        return self._reduce("min")

    def any(self) -> TrajectoryPredicate:
        """Whether any value of the trajectory is true (non-zero): a predicate."""
        return TrajectoryPredicate(self._reduce("any"))

    def all(self) -> TrajectoryPredicate:
        """Whether every value of the trajectory is true (non-zero): a predicate."""
        return TrajectoryPredicate(self._reduce("all"))

    def first(self) -> _Reduce:
        """The value at the first transition (one element per transition required)."""
        return self._reduce("first")

    def last(self) -> _Reduce:
        """The value at the last transition (one element per transition required)."""
        return self._reduce("last")


class _Key(_RowExpr):
    def __init__(self, key: NestedKey, fallback: bool) -> None:
        self.key, self.fallback = key, fallback

    def _evaluate(self, ctx: _Context) -> torch.Tensor:
        return ctx.column(self.key, self.fallback)

    def _fields(self) -> set[tuple[NestedKey, bool]]:
        return {(self.key, self.fallback)}

    def __repr__(self) -> str:
        return f"traj.{self.key}" if self.fallback else f"traj[{self.key!r}]"


class _RowCompare(_RowExpr):
    def __init__(self, op: Callable, left: Any, right: Any) -> None:
        self.op, self.left, self.right = op, left, right

    def _evaluate(self, ctx: _Context) -> torch.Tensor:
        left, right = _rows_of(self.left, ctx), _rows_of(self.right, ctx)
        if isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor):
            while right.ndim < left.ndim:
                right = right.unsqueeze(-1)
            while left.ndim < right.ndim:
                left = left.unsqueeze(-1)
        return self.op(left, right)

    def _fields(self) -> set[tuple[NestedKey, bool]]:
        return _fields_of(self.left, self.right)

    def __repr__(self) -> str:
        return f"({self.left!r} {_SYMBOLS[self.op]} {self.right!r})"


class _Reduce(_Expr):
    def __init__(self, how: str, operand: _RowExpr) -> None:
        self.how, self.operand = how, operand

    def _evaluate(self, ctx: _Context) -> torch.Tensor:
        values = self.operand._evaluate(ctx)
        flat = values.reshape(values.shape[0], -1)
        how = self.how
        if how in ("first", "last"):
            if flat.shape[1] != 1:
                raise ValueError(
                    f"{self!r} gives {flat.shape[1]} values per trajectory "
                    f"({tuple(values.shape[1:])} per transition); comparisons need one."
                )
            rows = ctx.first_row if how == "first" else ctx.last_row
            return flat[:, 0].index_select(0, rows).to(torch.float64)
        if how in ("any", "all"):
            hits = flat.bool().any(1) if how == "any" else (~flat.bool()).any(1)
            found = ctx.per_trajectory(hits.to(torch.long), "amax") > 0
            return found if how == "any" else ~found
        if how in ("sum", "mean"):
            total = ctx.per_trajectory(flat.to(torch.float64).sum(1), "sum")
            return total if how == "sum" else total / (ctx.lengths * flat.shape[1])
        per_row = flat.to(torch.float64).amax(1) if how == "max" else flat.to(torch.float64).amin(1)
        return ctx.per_trajectory(per_row, "amax" if how == "max" else "amin")

    def _fields(self) -> set[tuple[NestedKey, bool]]:
        return self.operand._fields()

    def __repr__(self) -> str:
        return f"{self.operand!r}.{self.how}()"


class _Length(_Expr):
    def _evaluate(self, ctx: _Context) -> torch.Tensor:
        return ctx.lengths

    def __repr__(self) -> str:
        return "traj.length"


class _Compare(_Expr):
    def __init__(self, op: Callable, left: _Expr, right: Any) -> None:
        self.op, self.left, self.right = op, left, right

    def _evaluate(self, ctx: _Context) -> torch.Tensor:
        right = self.right._evaluate(ctx) if isinstance(self.right, _Expr) else self.right
        return self.op(self.left._evaluate(ctx), right)

    def _fields(self) -> set[tuple[NestedKey, bool]]:
        return _fields_of(self.left, self.right)

    def __repr__(self) -> str:
        return f"({self.left!r} {_SYMBOLS[self.op]} {self.right!r})"


class _Logic(_Expr):
    def __init__(self, op: str, *operands: TrajectoryPredicate) -> None:
        self.op, self.operands = op, operands

    def _evaluate(self, ctx: _Context) -> torch.Tensor:
        values = [p._evaluate(ctx) for p in self.operands]
        if self.op == "~":
            return ~values[0]
        return values[0] & values[1] if self.op == "&" else values[0] | values[1]

    def _fields(self) -> set[tuple[NestedKey, bool]]:
        return _fields_of(*self.operands)

    def __repr__(self) -> str:
        if self.op == "~":
            return f"~{self.operands[0]!r}"
        return f"({self.operands[0]!r} {self.op} {self.operands[1]!r})"


class TrajectoryPredicate(_Expr):
    """A condition on whole trajectories, built from :data:`traj`.

    Combine predicates with ``&``, ``|`` and ``~``. A predicate is evaluated on
    every stored trajectory at once by the buffer's ``query``; called on one
    :class:`Trajectory` (or a TensorDict of one trajectory) it returns a bool.
    ``required_keys()`` lists the entries it reads.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import traj
        >>> good = (traj.reward.sum() > 1) & (traj.length >= 3)
        >>> sorted(good.required_keys())
        ['reward']
        >>> good(TensorDict({"reward": torch.ones(3)}, [3]))
        True
    """

    def __init__(self, node: _Expr) -> None:
        self._node = node

    def _evaluate(self, ctx: _Context) -> torch.Tensor:
        return self._node._evaluate(ctx).to(torch.bool)

    def _fields(self) -> set[tuple[NestedKey, bool]]:
        return self._node._fields()

    def __and__(self, other: TrajectoryPredicate) -> TrajectoryPredicate:
        return TrajectoryPredicate(_Logic("&", self, _as_predicate(other, "&")))

    def __or__(self, other: TrajectoryPredicate) -> TrajectoryPredicate:
        return TrajectoryPredicate(_Logic("|", self, _as_predicate(other, "|")))

    def __invert__(self) -> TrajectoryPredicate:
        return TrajectoryPredicate(_Logic("~", self))

    def __call__(self, trajectory: Any) -> bool:
        """Evaluate on one trajectory (a :class:`~rbdata.Trajectory` or a TensorDict)."""
        data = getattr(trajectory, "data", trajectory)
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"a TrajectoryPredicate applies to a Trajectory or a TensorDict, got "
                f"{type(trajectory).__name__}."
            )
        n = data.batch_size[0] if data.batch_dims else 0
        ctx = _Context(data, torch.zeros(n, dtype=torch.long), 1)
        return bool(self._evaluate(ctx)[0])

    def __repr__(self) -> str:
        return repr(self._node)


def _as_predicate(value: Any, op: str) -> TrajectoryPredicate:
    if isinstance(value, TrajectoryPredicate):
        return value
    raise TypeError(
        f"'{op}' combines trajectory predicates (e.g. traj.length > 10), got {value!r}."
    )


class _TrajBuilder:
    """Entry point of the query language: ``traj.<key>``, ``traj[key]`` and ``traj.length``."""

    @property
    def length(self) -> _Length:
        """The number of transitions of a trajectory."""
        return _Length()

    def __getattr__(self, name: str) -> _Key:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Key(name, fallback=True)

    def __getitem__(self, key: NestedKey) -> _Key:
        return _Key(normalize_key(key), fallback=False)

    def __repr__(self) -> str:
        return "traj"


traj = _TrajBuilder()
"""Builds trajectory predicates: ``traj.reward`` reads ``"reward"`` (or ``("next", "reward")``
when only that is stored), ``traj["next", "obs"]`` an exact entry, ``traj.length`` the length;
``.sum() .mean() .max() .min() .any() .all() .first() .last()`` reduce per trajectory."""
