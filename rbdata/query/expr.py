"""The query language: ``traj`` builds :class:`TrajectoryPredicate` expressions.

``traj.reward.sum() > 100`` is evaluated on all trajectories at once
(segment reductions over the transitions, no Python loop over trajectories)
and knows which entries it reads, so a query fetches only those. A
:class:`TrajectoryPredicate` may also wrap a plain callable (called once per
trajectory) and says which entries it reads when told.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key
from rbdata.query.context import EvalContext
from rbdata.trajectories.view import Trajectory

_SYMBOLS = {
    operator.gt: ">",
    operator.ge: ">=",
    operator.lt: "<",
    operator.le: "<=",
    operator.eq: "==",
    operator.ne: "!=",
}

#: The entries an expression reads, as ``(key, falls back to ("next", key))``; None: unknown.
Fields = set[tuple[NestedKey, bool]] | None


def _union_fields(*values: Any) -> Fields:
    out: set[tuple[NestedKey, bool]] = set()
    for value in values:
        if isinstance(value, Expr):
            fields = value.fields()
            if fields is None:
                return None
            out |= fields
    return out


class Expr:
    """A node of a query: per-transition (``row``) or per-trajectory (``traj``) values."""

    level = "traj"

    def evaluate(self, ctx: EvalContext) -> torch.Tensor:
        """The node's values on every trajectory (``traj``) or transition (``row``) of ``ctx``."""
        raise NotImplementedError

    def fields(self) -> Fields:
        """The entries the node reads, with their fallback flag (None: unknown)."""
        return set()

    def required_keys(self) -> frozenset[NestedKey] | None:
        """The entries this expression reads (None when unknown).

        Keys are given as written: ``traj.reward`` reads ``"reward"``, or
        ``("next", "reward")`` when only the latter is stored.
        """
        fields = self.fields()
        return None if fields is None else frozenset(key for key, _ in fields)

    def _compare(self, other: Any, op: Callable[[Any, Any], Any]) -> Expr:
        if self.level == "row" or (isinstance(other, Expr) and other.level == "row"):
            return _RowCompare(op, self, other)
        return _wrap(_Compare(op, self, other))

    def __gt__(self, other: Any) -> Expr:
        return self._compare(other, operator.gt)

    def __ge__(self, other: Any) -> Expr:
        return self._compare(other, operator.ge)

    def __lt__(self, other: Any) -> Expr:
        return self._compare(other, operator.lt)

    def __le__(self, other: Any) -> Expr:
        return self._compare(other, operator.le)

    # Comparisons build expressions (as tensors' do), not object's bool; so no hash either.
    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._compare(other, operator.eq)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._compare(other, operator.ne)

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise TypeError(
            f"{self!r} is a query expression, not a bool: combine conditions with &, | and ~ "
            "(not 'and', 'or', 'not') and pass the result to query()."
        )

    def __call__(self, trajectory: Any) -> bool:
        """Raise: a value of the trajectories is not a condition on them."""
        raise not_a_condition(self)


def not_a_condition(expr: Expr) -> TypeError:
    """The error for an expression used where a condition on whole trajectories is needed."""
    if expr.level == "row":
        hint = "it compares per-transition values: reduce it with .any() or .all()"
    else:
        hint = "compare it, e.g. traj.reward.sum() > 0"
    return TypeError(f"{expr!r} is not a condition on trajectories; {hint}.")


def _rows_of(value: Any, ctx: EvalContext) -> Any:
    if not isinstance(value, Expr):
        return value
    out = value.evaluate(ctx)
    return out if value.level == "row" else out[ctx.segment]


class _RowExpr(Expr):
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
        return _wrap(self._reduce("any"))

    def all(self) -> TrajectoryPredicate:
        """Whether every value of the trajectory is true (non-zero): a predicate."""
        return _wrap(self._reduce("all"))

    def first(self) -> _Reduce:
        """The value at the first transition (one element per transition required)."""
        return self._reduce("first")

    def last(self) -> _Reduce:
        """The value at the last transition (one element per transition required)."""
        return self._reduce("last")


class _Key(_RowExpr):
    """An entry; a str key falls back to ``("next", key)`` when only that is stored."""

    def __init__(self, key: NestedKey, as_attribute: bool) -> None:
        self.key, self.as_attribute = key, as_attribute
        self.fallback = isinstance(key, str)

    def evaluate(self, ctx: EvalContext) -> torch.Tensor:
        return ctx.column(self.key, self.fallback)

    def fields(self) -> Fields:
        return {(self.key, self.fallback)}

    def __repr__(self) -> str:
        return f"traj.{self.key}" if self.as_attribute else f"traj[{self.key!r}]"


class _RowCompare(_RowExpr):
    def __init__(self, op: Callable[[Any, Any], Any], left: Any, right: Any) -> None:
        self.op, self.left, self.right = op, left, right

    def evaluate(self, ctx: EvalContext) -> torch.Tensor:
        left, right = _rows_of(self.left, ctx), _rows_of(self.right, ctx)
        if isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor):
            while right.ndim < left.ndim:
                right = right.unsqueeze(-1)
            while left.ndim < right.ndim:
                left = left.unsqueeze(-1)
        result: torch.Tensor = self.op(left, right)
        return result

    def fields(self) -> Fields:
        return _union_fields(self.left, self.right)

    def __repr__(self) -> str:
        return f"({self.left!r} {_SYMBOLS[self.op]} {self.right!r})"


class _Reduce(Expr):
    def __init__(self, how: str, operand: _RowExpr, name: str | None = None) -> None:
        self.how, self.operand, self.name = how, operand, name

    def evaluate(self, ctx: EvalContext) -> torch.Tensor:
        values = self.operand.evaluate(ctx)
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

    def fields(self) -> Fields:
        return self.operand.fields()

    def __repr__(self) -> str:
        return self.name or f"{self.operand!r}.{self.how}()"


class _Length(Expr):
    def evaluate(self, ctx: EvalContext) -> torch.Tensor:
        return ctx.lengths

    def __repr__(self) -> str:
        return "traj.length"


class _Compare(Expr):
    def __init__(self, op: Callable[[Any, Any], Any], left: Expr, right: Any) -> None:
        self.op, self.left, self.right = op, left, right

    def evaluate(self, ctx: EvalContext) -> torch.Tensor:
        right = self.right.evaluate(ctx) if isinstance(self.right, Expr) else self.right
        result: torch.Tensor = self.op(self.left.evaluate(ctx), right)
        return result

    def fields(self) -> Fields:
        return _union_fields(self.left, self.right)

    def __repr__(self) -> str:
        return f"({self.left!r} {_SYMBOLS[self.op]} {self.right!r})"


class _Logic(Expr):
    def __init__(self, op: str, *operands: Expr) -> None:
        self.op, self.operands = op, operands

    def evaluate(self, ctx: EvalContext) -> torch.Tensor:
        values = [p.evaluate(ctx).to(torch.bool) for p in self.operands]
        if self.op == "~":
            return ~values[0]
        return values[0] & values[1] if self.op == "&" else values[0] | values[1]

    def fields(self) -> Fields:
        return _union_fields(*self.operands)

    def __repr__(self) -> str:
        if self.op == "~":
            return f"~{self.operands[0]!r}"
        return f"({self.operands[0]!r} {self.op} {self.operands[1]!r})"


class _Opaque(Expr):
    """A plain callable, called on each non-empty trajectory."""

    def __init__(
        self,
        fn: Callable[[Trajectory], Any],
        description: str,
        keys: frozenset[NestedKey] | None,
    ) -> None:
        self.fn, self.description, self.keys = fn, description, keys

    def evaluate(self, ctx: EvalContext) -> torch.Tensor:
        views = ctx.views()
        return torch.tensor([view is not None and bool(self.fn(view)) for view in views])

    def fields(self) -> Fields:
        return None if self.keys is None else {(k, isinstance(k, str)) for k in self.keys}

    def __repr__(self) -> str:
        return self.description


class TrajectoryPredicate(Expr):
    """A condition on whole trajectories.

    Usually built from :data:`traj` (``traj.reward.sum() > 100``), such a
    predicate is evaluated on every trajectory at once, reading only the
    entries it needs. Wrapping a plain callable is also possible:
    ``TrajectoryPredicate(fn, description, keys)`` calls ``fn`` on each
    :class:`Trajectory`; ``keys`` (the entries ``fn`` reads) lets a query fetch
    only those, else every entry is read. Combine predicates with ``&``, ``|``
    and ``~``; calling one on a :class:`Trajectory` (or a TensorDict of one
    trajectory) returns a bool; ``required_keys()`` lists the entries it reads.

    Args:
        fn: a callable mapping a :class:`Trajectory` to a bool (or a
            TrajectoryPredicate, reused as it is when ``keys`` is None).
        description: the text shown by ``repr``.
        keys: the entries ``fn`` reads (None: unknown, so every entry is read).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import TrajectoryPredicate, traj
        >>> good = (traj.reward.sum() > 1) & (traj.length >= 3)
        >>> sorted(good.required_keys())
        ['reward']
        >>> good(TensorDict({"reward": torch.ones(3)}, [3]))
        True
        >>> short = TrajectoryPredicate(lambda t: t.length < 3, "short", keys=())
        >>> short, short.required_keys(), (good | short).required_keys()
        (TrajectoryPredicate(short), frozenset(), frozenset({'reward'}))
    """

    #: the expression the predicate evaluates (one bool per trajectory)
    node: Expr

    def __init__(
        self,
        fn: Callable[[Trajectory], Any],
        description: str = "predicate",
        keys: Iterable[NestedKey] | None = None,
    ) -> None:
        if isinstance(fn, TrajectoryPredicate) and keys is None:
            self.node = fn.node
            return
        if not callable(fn) or isinstance(fn, Expr):
            raise TypeError(f"fn must be a callable mapping a Trajectory to a bool, got {fn!r}.")
        if not isinstance(description, str):
            raise TypeError(f"description must be a str, got {type(description).__name__}.")
        wanted = None if keys is None else frozenset(normalize_key(k, "keys") for k in keys)
        self.node = _Opaque(fn, description, wanted)

    def evaluate(self, ctx: EvalContext) -> torch.Tensor:
        """One bool per trajectory of ``ctx``."""
        return self.node.evaluate(ctx).to(torch.bool)

    def fields(self) -> Fields:
        """The entries the predicate reads, with their fallback flag (None: unknown)."""
        return self.node.fields()

    def __and__(self, other: TrajectoryPredicate) -> TrajectoryPredicate:
        return _wrap(_Logic("&", self.node, _as_predicate(other, "&").node))

    def __or__(self, other: TrajectoryPredicate) -> TrajectoryPredicate:
        return _wrap(_Logic("|", self.node, _as_predicate(other, "|").node))

    def __invert__(self) -> TrajectoryPredicate:
        return _wrap(_Logic("~", self.node))

    def __call__(self, trajectory: Any) -> bool:
        """Evaluate on one trajectory (a :class:`~rbdata.Trajectory` or a TensorDict)."""
        view = trajectory if isinstance(trajectory, Trajectory) else None
        data = trajectory.data if view is not None else trajectory
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"a TrajectoryPredicate applies to a Trajectory or a TensorDict, got "
                f"{type(trajectory).__name__}."
            )
        n = data.batch_size[0] if data.batch_dims else 0
        if view is None and n:
            view = Trajectory(data)
        ctx = EvalContext(data, torch.zeros(n, dtype=torch.long), 1, [view])
        return bool(self.evaluate(ctx)[0])

    def __repr__(self) -> str:
        return f"TrajectoryPredicate({self.node!r})"


def _wrap(node: Expr) -> TrajectoryPredicate:
    """The predicate evaluating ``node`` (one bool per trajectory)."""
    predicate = TrajectoryPredicate.__new__(TrajectoryPredicate)
    predicate.node = node
    return predicate


def fields_of(expr: Expr) -> Fields:
    """The entries ``expr`` reads, with their fallback flag (None: unknown)."""
    return expr.fields()


def evaluate(predicate: TrajectoryPredicate, ctx: EvalContext) -> torch.Tensor:
    """One bool per trajectory of ``ctx``."""
    return predicate.evaluate(ctx)


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

    @property
    def total_reward(self) -> _Reduce:
        """The sum of the rewards of a trajectory (``traj.reward.sum()``)."""
        return _Reduce("sum", _Key("reward", as_attribute=True), name="traj.total_reward")

    def __getattr__(self, name: str) -> _Key:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Key(name, as_attribute=True)

    def __getitem__(self, key: NestedKey) -> _Key:
        return _Key(normalize_key(key), as_attribute=False)

    def __repr__(self) -> str:
        return "traj"


traj = _TrajBuilder()
"""Builds trajectory predicates: ``traj.reward`` (or ``traj["reward"]``) reads ``"reward"``, or
``("next", "reward")`` when only that is stored; ``traj["next", "obs"]`` a nested entry,
``traj.length`` the length, ``traj.total_reward`` the sum of rewards;
``.sum() .mean() .max() .min() .any() .all() .first() .last()`` reduce per trajectory."""
