"""Named points where a test kills this process, to check the crash contract.

The fault-injection tests (``tests/sharing/``) start writer processes with
``RBDATA_FAULT_POINT=<name>`` and ``RBDATA_FAULT_AFTER=<n>`` in their
environment: the ``n``-th time (counting from 1) the process passes the
point named, it sends itself ``SIGKILL``, as the OOM killer or a preemption
would. The points:

- ``took-lock``: the cross-process lock just taken, nothing else done (not
  even the version moved);
- ``holding-lock``: just after taking the cross-process lock (the version moved);
- ``after-reserve``: rows reserved, the lock released, nothing copied;
- ``mid-copy``: half of a reserved batch's fields copied;
- ``before-commit``: every row copied, the reservation not yet released;
- ``locked-mid-copy``: half of a batch written under the lock (a prioritized,
  slice, transform or consume-after-n write) copied, the lock held;
- ``locked-before-commit``: such a write done and told to the sampler, its
  journal not yet released.

Without the variable (the normal case) :func:`fault_point` is a no-op.
"""

from __future__ import annotations

import os
import signal

__all__ = ["POINTS", "any_armed", "arm", "armed", "fault_point"]

POINTS = (
    "took-lock",
    "holding-lock",
    "after-reserve",
    "mid-copy",
    "before-commit",
    "locked-mid-copy",
    "locked-before-commit",
)

_POINT = os.environ.get("RBDATA_FAULT_POINT") or None
_AFTER = [int(os.environ.get("RBDATA_FAULT_AFTER", "1") or 1)]


def arm(point: str | None, after: int = 1) -> None:
    """Kill this process the ``after``-th time it passes ``point`` (None: never); for forked tests.

    Raises:
        ValueError: for a point not in :data:`POINTS`, or ``after < 1``.
    """
    global _POINT
    if point is not None and point not in POINTS:
        raise ValueError(f"point must be one of {POINTS} or None, got {point!r}.")
    if after < 1:
        raise ValueError(f"after must be >= 1, got {after}.")
    _POINT, _AFTER[0] = point, after


def any_armed() -> bool:
    """Whether some point is armed: a hot path asks once, then passes its points only if so."""
    return _POINT is not None


def armed(name: str) -> bool:
    """Whether the environment names the point ``name`` (a test will kill this process there)."""
    return name == _POINT


def fault_point(name: str) -> None:
    """Kill this process here if the environment names ``name`` (see the module docstring)."""
    if _POINT is None or name != _POINT:
        return
    _AFTER[0] -= 1
    if _AFTER[0] <= 0:
        os.kill(os.getpid(), signal.SIGKILL)
