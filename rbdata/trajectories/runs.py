"""Where trajectories start: the one boundary rule every part of rbdata uses.

Transitions are laid out in time order, optionally in lanes of equal length
one after another (one lane per environment of a storage with ``ndim > 1``,
or one window per anchor). A new trajectory starts

- at the first transition of a lane (and of the data, unless it continues
  the transition before it, see ``prev``);
- where the trajectory id changes (``kind="ids"``; with ids of several
  columns, where any column changes);
- just after an end flag (``kind="ends"``).

:func:`split_runs` applies that rule to a block of markers; the slice
samplers' indexes (:mod:`rbdata.trajectories.index`,
:mod:`rbdata.trajectories.layouts`), :class:`~rbdata.Sequence`'s episode
edges (:mod:`rbdata.trajectories.edges`), queries and
:func:`~rbdata.iter_trajectories`, and :func:`~rbdata.find_start_stop_traj`
all call it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["split_runs"]


def split_runs(
    marks: np.ndarray, kind: str, *, prev: Any = None, lane: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Split consecutive transitions into trajectories.

    Args:
        marks: one marker per transition, in time order: the trajectory id
            (``kind="ids"``; a ``[n, k]`` array: k id columns) or the end flag
            (``kind="ends"``).
        kind: ``"ids"`` or ``"ends"``.
        prev: the marker of the transition just before ``marks[0]``, or None
            when ``marks[0]`` cannot continue anything.
        lane: transitions per lane when ``marks`` holds lanes one after
            another (each lane starts a trajectory); None: one lane.

    Returns:
        ``(starts, lengths)``: int64 positions in ``marks`` where each
        trajectory starts (sorted), and their lengths.

    Examples:
        >>> import numpy as np
        >>> split_runs(np.array([4, 4, 5, 5, 5]), "ids")
        (array([0, 2]), array([2, 3]))
        >>> split_runs(np.array([False, True, False, False]), "ends", prev=False)[0]
        array([2])
        >>> split_runs(np.array([True, False, False, False]), "ends", lane=2)[0]
        array([0, 1, 2])
    """
    n = marks.shape[0]
    begins = np.empty(n, dtype=bool)
    if n:
        if kind != "ids":
            begins[1:] = marks[:-1]
            begins[0] = prev is None or bool(prev)
        elif marks.ndim == 1:
            np.not_equal(marks[1:], marks[:-1], out=begins[1:])
            begins[0] = prev is None or marks[0] != prev
        else:
            np.any(marks[1:] != marks[:-1], axis=1, out=begins[1:])
            begins[0] = prev is None or bool(np.any(marks[0] != prev))
        if lane is not None and lane < n:
            begins[::lane] = True
    starts = np.flatnonzero(begins).astype(np.int64, copy=False)
    return starts, np.diff(starts, append=n)
