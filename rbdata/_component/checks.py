"""Argument checks shared by every rbdata component: one rule for each kind of mistake.

The rule: a value of the wrong *type* raises ``TypeError``, a value of the
right type but out of range raises ``ValueError``; both name the argument,
say what was given and what was expected. Checks run before anything is
changed (:func:`rbdata._component.stateful.transaction` rolls components back
when a multi-step change fails half-way).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch

__all__ = [
    "NestedKey",
    "check_bool",
    "check_indices",
    "check_int",
    "check_number",
    "check_optional_int",
    "key_path",
    "normalize_key",
]

#: A TensorDict key: a str for a top-level entry, a tuple of str for a nested one.
NestedKey = str | tuple[str, ...]


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum``.

    Raises:
        TypeError: if ``value`` is not an int (numpy and torch integer scalars count as ints).
        ValueError: if it is below ``minimum``.

    Examples:
        >>> check_int(3, "batch_size", minimum=1)
        3
        >>> check_int(0, "batch_size", minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: batch_size must be >= 1, got 0.
    """
    if type(value) is int and (minimum is None or value >= minimum):
        return value  # the common case, on every sample: no abc instance check
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, torch.Tensor) and value.ndim == 0 and not value.is_floating_point():
            value = int(value)
        else:
            raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r}).")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}.")
    return number


def check_optional_int(value: Any, name: str, *, minimum: int | None = None) -> int | None:
    """:func:`check_int`, letting None through."""
    return None if value is None else check_int(value, name, minimum=minimum)


def check_number(
    value: Any, name: str, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """``value`` as a float if it is a real number (not a bool) within ``[minimum, maximum]``.

    Raises:
        TypeError: if ``value`` is not a real number.
        ValueError: if it is NaN or outside the bounds.
    """
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        value = value.item()  # a one-element tensor (torchrl accepts them)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r}).")
    number = float(value)
    low = -float("inf") if minimum is None else minimum
    high = float("inf") if maximum is None else maximum
    if not low <= number <= high:
        bounds = f"in [{low:g}, {high:g}]" if maximum is not None else f">= {low:g}"
        raise ValueError(f"{name} must be {bounds}, got {number!r}.")
    return number


def check_bool(value: Any, name: str) -> bool:
    """``value`` if it is a bool.

    Raises:
        TypeError: otherwise.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r}).")
    return value


def check_indices(index: torch.Tensor | int, written: int, name: str = "index") -> torch.Tensor:
    """``index`` as a 1-D int64 tensor of slots in ``[0, written)``.

    Raises:
        TypeError: if ``index`` does not hold integers (floats and bool masks are refused).
        ValueError: if a slot lies outside the written ones.
    """
    if isinstance(index, bool):
        raise TypeError(f"{name} must be an int or an integer tensor, got a bool.")
    index = torch.as_tensor(index)
    if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        raise TypeError(
            f"{name} must hold integers, got dtype {index.dtype} (a bool mask or float "
            "positions are not slots)."
        )
    if index.dtype != torch.long or not index.is_cpu:
        index = index.to(device="cpu", dtype=torch.long)
    if index.ndim != 1:
        index = index.reshape(-1)
    if index.numel():
        slots = index.numpy()  # numpy reductions: cheaper than aminmax plus two reads
        low, high = int(np.minimum.reduce(slots)), int(np.maximum.reduce(slots))
        if low < 0 or high >= written:
            bad = low if low < 0 else high
            raise ValueError(
                f"{name} holds slot {bad}, outside the {written} written slot(s) [0, {written})."
            )
    return index


def key_path(key: NestedKey) -> tuple[str, ...]:
    """A nested key as a tuple of its parts (a top-level key as a 1-tuple)."""
    return (key,) if isinstance(key, str) else tuple(key)


def normalize_key(key: Any, name: str = "key", *, dotted: bool = True) -> NestedKey:
    """``key`` as a str (top-level entry) or a tuple of two or more str (nested entry).

    Args:
        key: a str or a non-empty tuple of str (a 1-tuple means its only element).
        name: the argument name used in error messages.
        dotted: whether a str may contain dots (where the reference documents
            refuse dotted strings, e.g. ``version_key``, pass False).

    Raises:
        TypeError: if ``key`` is neither a str nor a non-empty tuple of str.
        ValueError: if ``key`` is a dotted str and ``dotted`` is False.

    Examples:
        >>> normalize_key(("next", "reward")), normalize_key(("obs",))
        (('next', 'reward'), 'obs')
    """
    if isinstance(key, str):
        if not dotted and "." in key:
            raise ValueError(
                f"Dotted-string keys are not split: {name}={key!r} is a dotted string; pass "
                "nested keys as tuples, e.g. "
                f"{tuple(key.split('.'))!r}."
            )
        return key
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return key[0] if len(key) == 1 else key
    raise TypeError(f"{name} must be a str or a non-empty tuple of str, got {key!r}.")
