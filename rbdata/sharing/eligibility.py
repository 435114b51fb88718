"""Which writes and draws of a shared buffer may skip its lock: decided here, from the parts.

A shared buffer's writer copies its rows outside the cross-process lock
(:mod:`.reserved_write`) only when nothing but the counters has to move under
it: the rows are a tensor storage's, the writer writes in ring order, and
neither the sampler nor the sample unit keeps state of each write (they hear
of it later through the feed, :mod:`.feed`, as of other processes' writes).
A reader whose batch holds rows still being copied draws again, rather than
wait, only when a draw changes nothing but the sampler's random state.

The components carry no flag for this: each says what it is in its own terms
(:mod:`.components`: the writer writes in ring order, the sampler's draws
read only the length or are independent of each other, the sample unit tracks
trajectories), and the sharing layer decides from that. A sampler declares its
capabilities for its own class (a subclass may keep state the base does not).

Examples:
    >>> from rbdata import LazyTensorStorage, RandomSampler, RoundRobinWriter, Transition
    >>> can_reserve(RoundRobinWriter(), RandomSampler(), Transition())
    True
    >>> redraws_freely(RandomSampler())
    True
"""

from __future__ import annotations

from rbdata.sharing.components import Cursor, Draws, WriteNotes
from rbdata.sharing.counters import LocalCounters

__all__ = ["can_reserve", "redraws_freely"]

#: the decisions made, by the parts' types (they depend on nothing else)
_DECIDED: dict[tuple[type, ...], bool] = {}


def can_reserve(writer: Cursor, sampler: Draws, sample_unit: WriteNotes) -> bool:
    """Whether a write through these parts may reserve its rows and copy them outside the lock.

    The writer must write in ring order on shared cells (a ``compilable``
    writer's are traced), the sampler's draws must read only the storage's
    length, and the sample unit must track no trajectories.
    """
    key = (type(writer), type(writer.counters), type(sampler), type(sample_unit))
    known = _DECIDED.get(key)
    if known is None:
        known = _DECIDED[key] = (
            writer.writes_in_ring_order
            and not issubclass(key[1], LocalCounters)
            and sampler.reads_only_length
            and not sample_unit.tracks_trajectories
        )
    return known


def redraws_freely(sampler: Draws) -> bool:
    """Whether a batch drawn again is as likely as the first (a draw moves only the RNG)."""
    return sampler.draws_independent
