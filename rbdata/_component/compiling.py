"""What ``torch.compile`` must not trace (graph breaks), as typed decorators.

``torch.compiler.disable`` is untyped: these keep the decorated function's type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch

_F = TypeVar("_F", bound=Callable[..., Any])


def not_traced(fn: _F) -> _F:
    """``fn`` run eagerly under ``torch.compile`` (nor are the functions it calls traced).

    Examples:
        >>> @not_traced
        ... def twice(x):
        ...     return 2 * x
        >>> twice(3)
        6
    """
    return cast(_F, torch.compiler.disable(fn))  # type: ignore[no-untyped-call]


def own_frame(fn: _F) -> _F:
    """``fn`` left out of the caller's graph; what it calls is traced in frames of its own.

    Examples:
        >>> @own_frame
        ... def call(f, x):
        ...     return f(x)
        >>> call(abs, -2)
        2
    """
    return cast(_F, torch.compiler.disable(fn, recursive=False))  # type: ignore[no-untyped-call]
