"""Which of a buffer's transforms a query predicate depends on, and which entries it reads.

A predicate built from ``traj`` knows the entries it reads. Walking the
transform chain backwards, a transform is run for the evaluation when it may
write one of those entries (its ``out_keys`` overlap them) or may drop rows
(``filters_rows``); its ``in_keys`` then join the entries needed. A transform
that does not declare what it writes (or reads, when it is run) makes the
evaluation run it and everything before it on every stored entry.
"""

from __future__ import annotations

from typing import Any

from rbdata._component.checks import NestedKey, key_path, normalize_key
from rbdata.transforms import Compose

__all__ = ["evaluation_plan", "transform_steps"]


def transform_steps(transform: Any) -> list[Any]:
    """The transforms of ``transform`` in the order they run (nested Compose flattened)."""
    if transform is None:
        return []
    if isinstance(transform, Compose):
        return [step for inner in transform.transforms for step in transform_steps(inner)]
    return [transform]


def _overlaps(written: list[NestedKey], wanted: set[NestedKey]) -> bool:
    """Whether an entry of ``written`` is, contains or is inside one of ``wanted``."""
    for out in map(key_path, written):
        for key in map(key_path, wanted):
            depth = min(len(out), len(key))
            if out[:depth] == key[:depth]:
                return True
    return False


def _declared(keys: Any) -> list[NestedKey] | None:
    return None if keys is None else [normalize_key(k) for k in keys]


def evaluation_plan(
    transform: Any, wanted: set[NestedKey], stored: set[NestedKey]
) -> tuple[list[Any], set[NestedKey] | None]:
    """The transforms to run before evaluating a predicate, and the stored entries to read.

    Args:
        transform: the buffer's transform (None: none).
        wanted: the entries the predicate may read (after the transforms).
        stored: the entries the storage holds.

    Returns:
        ``(steps, fetch)``: the transforms to run, in order, and the stored
        entries to read (None: all of them).
    """
    steps = transform_steps(transform)
    needed = set(wanted)
    kept: list[Any] = []
    for position in range(len(steps) - 1, -1, -1):
        step = steps[position]
        writes = _declared(getattr(step, "out_keys", None))
        if not writes:
            return steps[: position + 1] + kept[::-1], None
        if getattr(step, "filters_rows", False) or _overlaps(writes, needed):
            reads = _declared(getattr(step, "in_keys", None))
            if reads is None:
                return steps[: position + 1] + kept[::-1], None
            kept.append(step)
            needed |= set(reads)
    return kept[::-1], _inside(stored, needed)


def _inside(stored: set[NestedKey], needed: set[NestedKey]) -> set[NestedKey]:
    """The stored entries that are, or are nested inside, one of ``needed``."""
    prefixes = {key_path(key) for key in needed}
    return {key for key in stored if any(key_path(key)[: len(p)] == p for p in prefixes)}
