"""A shared, callable policy-version counter."""

from __future__ import annotations

import operator
import threading
from typing import Any

import torch

__all__ = ["PolicyVersion"]


class PolicyVersion:
    """A small integer counter shared by a learner, its buffer and its collectors.

    The learner moves it forward (``increment()`` after each weight update, or
    ``set(n)``); collectors call it to stamp the data they produce; a
    :class:`~rbdata.transforms.PolicyAgeFilter` built with
    ``current_version=version`` re-reads it on every filtering pass. Calling the
    object returns the current value, so it can be passed anywhere a
    ``Callable[[], int]`` is expected.

    The value lives in a shared-memory int64 tensor: a copy sent to another
    process (as a ``torch.multiprocessing`` process argument or through one of
    its queues) reads and writes the same counter. Changes are atomic among the
    threads of a process; across processes, reads always see a whole value and
    ``set`` is a single store, so keep read-modify-write updates
    (``increment``) to one process, the learner, as a policy version naturally
    is.

    Args:
        value: the starting version. Defaults to 0.

    Examples:
        >>> from rbdata import PolicyVersion
        >>> version = PolicyVersion()
        >>> version()
        0
        >>> version.increment()
        1
        >>> version.set(10)
        >>> int(version)
        10
    """

    def __init__(self, value: int = 0) -> None:
        self._value = torch.tensor(_check_int(value, "value"), dtype=torch.int64).share_memory_()
        self._lock = threading.Lock()

    def __call__(self) -> int:
        """The current version."""
        return int(self._value.item())

    def __int__(self) -> int:
        return self()

    def set(self, value: int) -> None:
        """Set the version to ``value``.

        Args:
            value: the new version, an int.

        Raises:
            TypeError: if ``value`` is not an int.
        """
        value = _check_int(value, "value")
        with self._lock:
            self._value.fill_(value)

    def increment(self, n: int = 1) -> int:
        """Add ``n`` to the version and return the new value.

        Args:
            n: how much to add. Defaults to 1.

        Returns:
            The version after the increment.

        Raises:
            TypeError: if ``n`` is not an int.
        """
        n = _check_int(n, "n")
        with self._lock:
            self._value.add_(n)
            return int(self._value.item())

    def __getstate__(self) -> dict[str, Any]:
        return {"value": self._value}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._value = state["value"]
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self()})"


def _check_int(value: Any, name: str) -> int:
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r}).")
