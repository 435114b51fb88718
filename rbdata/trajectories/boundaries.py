"""Trajectory boundaries of storage-ordered data: :func:`find_start_stop_traj`.

The one-shot, torchrl-format counterpart of the incremental index the slice
samplers keep (:mod:`rbdata.trajectories.index`): given per-step trajectory ids
or end flags laid out as in a ring storage (time along dim 0, one lane per batch
coordinate after it), it returns the first and last step of every trajectory.
The torchrl format decides the end flags (:func:`_end_flags`); each lane, read
in time order from just after its last end, is then split by
:func:`~rbdata.trajectories.runs.split_runs`.
"""

from __future__ import annotations

import operator

import numpy as np
import torch

from rbdata.errors import _BoundaryTypeError, _BoundaryValueError
from rbdata.trajectories.runs import split_runs

__all__ = ["find_start_stop_traj"]


def _last_written(cursor: int | torch.Tensor | range, length: int) -> int:
    """The row under the write cursor: an int, or the last entry of a tensor or range."""
    if isinstance(cursor, range | torch.Tensor):
        flat = cursor.reshape(-1) if isinstance(cursor, torch.Tensor) else cursor
        if len(flat) == 0:
            kind = "tensor" if isinstance(cursor, torch.Tensor) else "range"
            raise _BoundaryValueError(f"cursor must not be an empty {kind}, got {cursor!r}.")
        cursor = flat[-1]
    try:
        if isinstance(cursor, bool) or (
            isinstance(cursor, torch.Tensor) and cursor.dtype == torch.bool
        ):
            raise TypeError
        row = operator.index(cursor)
    except TypeError:
        raise _BoundaryTypeError(
            "cursor must be an int, an integer tensor or a range, got "
            f"{type(cursor).__name__} ({cursor!r})."
        ) from None
    if not -length <= row < length:
        raise _BoundaryValueError(
            f"cursor={row} is outside the {length} rows of the end-of-trajectory signal."
        )
    return row % length


def _end_flags(
    trajectory: torch.Tensor | None,
    end: torch.Tensor | None,
    at_capacity: bool,
    cursor: int | torch.Tensor | range | None,
) -> torch.Tensor:
    """A ``[T, *B]`` bool tensor in which every trajectory's last step is flagged."""
    if (trajectory is None) == (end is None):
        raise TypeError(
            "Exactly one of `trajectory` and `end` must be given, got "
            f"trajectory={'None' if trajectory is None else 'a tensor'} and "
            f"end={'None' if end is None else 'a tensor'}."
        )
    signal = trajectory if trajectory is not None else end
    if not isinstance(signal, torch.Tensor):
        name = "trajectory" if trajectory is not None else "end"
        raise TypeError(f"{name} must be a torch.Tensor, got {type(signal).__name__}.")
    if signal.ndim == 0:
        raise _BoundaryValueError(
            "the end-of-trajectory signal must be at least 1-dimensional (time along dim 0), "
            "got a 0-dimensional tensor."
        )
    length = signal.shape[0]
    if length == 0:
        raise _BoundaryValueError("cannot recover trajectory boundaries from an empty (T=0) input.")
    if trajectory is not None:
        # the last row ends a trajectory unless, in a full ring, its id goes on at row 0
        last = trajectory[-1:] != trajectory[:1] if at_capacity else torch.ones_like(trajectory[:1])
        flags = torch.cat([trajectory[1:] != trajectory[:-1], last.bool()])
    else:
        flags = signal.bool().clone()  # (signal is end)
        if not at_capacity:
            flags[-1] = True
    if at_capacity:
        if cursor is not None:
            flags[_last_written(cursor, length)] = True  # what followed it was overwritten
        flags[-1] |= ~flags.any(0)  # a lane without any end holds one trajectory ending last
    return flags


def find_start_stop_traj(
    *,
    trajectory: torch.Tensor | None = None,
    end: torch.Tensor | None = None,
    at_capacity: bool,
    cursor: int | torch.Tensor | range | None = None,
    device: torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Recover the trajectories of storage-ordered data from ids or end flags.

    The data is laid out as in a ring storage: time along dim 0 (shape
    ``[T, *B]``, one lane per batch coordinate). A trajectory ends where its
    id changes, or at a true end flag. When ``at_capacity`` is False the last
    row always ends a trajectory; when it is True the storage is a full ring,
    so a trajectory still running at the last row continues at row 0, the row
    under ``cursor`` (the last one written) ends a trajectory (the steps that
    followed it were overwritten), and a lane without any end holds one
    trajectory ending at its last row.

    Args:
        trajectory: per-step trajectory ids, ``[T, *B]``. Exactly one of
            ``trajectory`` and ``end`` is given.
        end: per-step end-of-trajectory flags, ``[T, *B]`` (True at a last step).
        at_capacity: whether the storage is full and wraps around.
        cursor: the last written row: an int, or a tensor or range whose last
            entry is (used only when ``at_capacity``).
        device: accepted for torchrl compatibility (checked to be a device): the
            boundaries are computed on the CPU and come back on the input's device.

    Returns:
        ``(start, stop, lengths)``: ``start`` and ``stop`` are ``[N, 1 + len(B)]``
        long tensors holding, for each of the ``N`` trajectories, the time index of
        its first (resp. last, inclusive) step then its batch coordinates;
        ``lengths`` is ``[N]``. Trajectories are grouped by lane, in time order
        within a lane; one that wraps has ``start[i, 0] > stop[i, 0]``.

    Raises:
        TypeError: when not exactly one of ``trajectory`` and ``end`` is given, or
            ``cursor`` has a wrong type (also a ``RuntimeError``).
        ValueError: (also a ``RuntimeError``) for a 0-d or empty signal, an empty
            ``cursor`` or one outside the rows.

    Examples:
        >>> import torch
        >>> from rbdata import find_start_stop_traj
        >>> end = torch.zeros(10, dtype=torch.bool)
        >>> end[2] = end[7] = True
        >>> start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True, cursor=4)
        >>> start[:, 0].tolist(), stop[:, 0].tolist(), lengths.tolist()
        ([8, 3, 5], [2, 4, 7], [5, 2, 3])
        >>> ids = torch.tensor([5, 5, 5, 0, 0, 1, 1, 1, 5, 5])
        >>> find_start_stop_traj(trajectory=ids, at_capacity=False)[2].tolist()
        [3, 2, 3, 2]
    """
    if device is not None:
        torch.device(device)  # a bad device raises here, as moving the flags there would
    flags = _end_flags(trajectory, end, at_capacity, cursor)
    length = flags.shape[0]
    # lanes in torchrl's order: those of the time-last transpose, time moved back first
    lanes = flags.transpose(0, -1)
    grid = lanes.reshape(-1, length).cpu().numpy()
    last = length - 1 - np.argmax(grid[:, ::-1], axis=1)  # every lane has an end
    rows = (last[:, None] + 1 + np.arange(length)) % length  # each lane, oldest first
    starts, lengths = split_runs(np.take_along_axis(grid, rows, 1).reshape(-1), "ends", lane=length)
    lane, step = np.divmod(starts, length)
    begin = rows[lane, step]
    batch = lanes.shape[:-1]
    coords = list(np.unravel_index(lane, batch)) if batch else []
    stop = np.stack([*coords, (begin + lengths - 1) % length], 1)
    if stop.shape[1] > 1:
        stop[:, [0, -1]] = stop[:, [-1, 0]]
    start = stop.copy()
    start[:, 0] = begin
    home = flags.device
    return (
        torch.from_numpy(start).to(home),
        torch.from_numpy(stop).to(home),
        torch.from_numpy(lengths).to(home),
    )
