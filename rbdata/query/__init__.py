"""The query language: ``traj`` expressions, their planning, and running them.

- :mod:`~rbdata.query.expr`: :data:`traj` and :class:`TrajectoryPredicate`,
  conditions on whole trajectories built from entries and reductions;
- :mod:`~rbdata.query.context`: the rows of many trajectories an expression
  is evaluated on;
- :mod:`~rbdata.query.plan`: which of the buffer's transforms must run before
  a predicate is evaluated;
- :mod:`~rbdata.query.split`: how transitions are split into trajectories
  (on :func:`~rbdata.trajectories.runs.split_runs`);
- :mod:`~rbdata.query.match`: evaluating a predicate on all trajectories at once;
- :mod:`~rbdata.query.storage`: :func:`run_query` on a storage (``buffer.query``);
- :mod:`~rbdata.query.tensordict`: :func:`iter_trajectories` and
  :func:`filter_trajectories` on a TensorDict of transitions.
"""

from rbdata.query.expr import TrajectoryPredicate, traj
from rbdata.query.storage import run_query
from rbdata.query.tensordict import filter_trajectories, iter_trajectories
from rbdata.trajectories.view import Trajectory

__all__ = [
    "Trajectory",
    "TrajectoryPredicate",
    "filter_trajectories",
    "iter_trajectories",
    "run_query",
    "traj",
]
