"""Library-neutral summaries of what a call returned or raised, for comparing outcomes."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase, is_tensorclass


def describe(value: Any) -> Any:
    """A comparable summary of ``value``: kind, shape and dtype of every leaf, keys.

    Values themselves are left out (draws differ between libraries); use
    :func:`contents` where the contents are deterministic.
    """
    if isinstance(value, torch.Tensor):
        return ("Tensor", tuple(value.shape), str(value.dtype))
    if is_tensorclass(value):
        return (
            type(value).__name__,
            tuple(value.batch_size),
            {k: describe(getattr(value, k)) for k in sorted(value.to_tensordict().keys())},
        )
    if isinstance(value, TensorDictBase):
        return (
            "TensorDict",
            tuple(value.batch_size),
            {_key(k): describe(v) for k, v in sorted(value.items(), key=lambda kv: _key(kv[0]))},
        )
    if isinstance(value, dict):
        return ("dict", {_key(k): describe(v) for k, v in sorted(value.items(), key=_sort_key)})
    if isinstance(value, (list, tuple)):
        if value and not any(
            isinstance(v, (torch.Tensor, TensorDictBase, list, tuple)) for v in value
        ):
            return (type(value).__name__, len(value))  # Python objects: which ones is a draw
        return (type(value).__name__, [describe(v) for v in value])
    return type(value).__name__


def contents(value: Any) -> Any:
    """The full contents of ``value`` as nested Python lists and dicts (for exact comparison)."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if is_tensorclass(value):
        value = value.to_tensordict()
    if isinstance(value, TensorDictBase):
        return {_key(k): contents(v) for k, v in value.items(include_nested=True, leaves_only=True)}
    if isinstance(value, dict):
        return {_key(k): contents(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [contents(v) for v in value]
    return value


def error_type(err: BaseException) -> str:
    """The builtin exception class ``err`` is an instance of (library subclasses folded in)."""
    for cls in type(err).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return type(err).__name__


def outcome(fn: Callable[[], Any], summarize: Callable[[Any], Any] = describe) -> Any:
    """``summarize(fn())``, or ``("raises", <builtin exception type>)`` if it raised."""
    try:
        result = fn()
    except Exception as err:  # noqa: BLE001 - the exception type is the outcome
        return ("raises", error_type(err))
    return summarize(result)


def keys_of(value: Any) -> list[str]:
    """Sorted (flattened, dotted) keys of a TensorDict / tensorclass / dict sample."""
    if is_tensorclass(value):
        value = value.to_tensordict()
    if isinstance(value, TensorDictBase):
        return sorted(_key(k) for k in value.keys(include_nested=True, leaves_only=True))
    if isinstance(value, dict):
        return sorted(_key(k) for k in value)
    return []


def _key(key: Any) -> str:
    return ".".join(map(str, key)) if isinstance(key, tuple) else str(key)


def _sort_key(item: tuple[Any, Any]) -> str:
    return _key(item[0])
