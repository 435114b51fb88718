"""Trajectories: the one boundary computation, the indexes built on it, the Trajectory view.

- :mod:`~rbdata.trajectories.runs`: :func:`split_runs`, the rule deciding where
  a trajectory starts (every module below calls it);
- :mod:`~rbdata.trajectories.markers`: which stored entries split
  transitions (trajectory ids or end flags), and
  :mod:`~rbdata.trajectories.reading`: reading them from a storage;
- :mod:`~rbdata.trajectories.ring`: where the written items of a ring
  storage lie (write positions, time order, the write seam);
- :mod:`~rbdata.trajectories.index`: the incremental index of a 1-D ring
  (slice samplers, :class:`~rbdata.Sequence`), and
  :mod:`~rbdata.trajectories.layouts`: the indexes recomputed for
  ``ndim > 1`` storages and fragmented data;
- :mod:`~rbdata.trajectories.edges`: :class:`~rbdata.Sequence`'s episode
  edges around sampled anchors;
- :mod:`~rbdata.trajectories.boundaries`: :func:`find_start_stop_traj`
  (torchrl's format);
- :mod:`~rbdata.trajectories.view`: :class:`Trajectory`, one trajectory's
  transitions (what queries return).
"""

from rbdata.trajectories.boundaries import find_start_stop_traj
from rbdata.trajectories.markers import DEFAULT_DONE_KEYS
from rbdata.trajectories.view import Trajectory

__all__ = ["DEFAULT_DONE_KEYS", "Trajectory", "find_start_stop_traj"]
