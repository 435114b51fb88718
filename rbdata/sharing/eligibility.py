"""Which writes and draws of a shared buffer may skip its lock: decided here, from the parts.

A shared buffer's writer copies its rows outside the cross-process lock
(:mod:`.reserved_write`) only when nothing but the counters has to move under
it: the rows are a tensor storage's, the writer writes in ring order, and
neither the sampler nor the sample unit keeps state of each write (they hear
of it later through the feed, :mod:`.feed`, as of other processes' writes).
A reader whose batch holds rows still being copied draws again, rather than
wait, only when a draw changes nothing but the sampler's random state.

The components carry no flag for this: the sharing layer knows the parts
it can trust (an exact type: a subclass may keep state the base does not).

Examples:
    >>> from rbdata import LazyTensorStorage, RandomSampler, RoundRobinWriter, Transition
    >>> can_reserve(RoundRobinWriter(), RandomSampler(), Transition())
    True
    >>> redraws_freely(RandomSampler())
    True
"""

from __future__ import annotations

from rbdata.sample_units import SampleUnit
from rbdata.samplers import RandomSampler, Sampler, SamplerWithoutReplacement
from rbdata.sharing.counters import LocalCounters
from rbdata.writers import RoundRobinWriter, TensorDictRoundRobinWriter, Writer

__all__ = ["can_reserve", "redraws_freely"]

#: samplers whose draws read nothing but slot numbers and the storage's length
_SLOT_SAMPLERS: frozenset[type[Sampler]] = frozenset({RandomSampler, SamplerWithoutReplacement})
#: writers that place a batch at the cursor, in ring order, counting it on their counters
_RING_WRITERS: frozenset[type[Writer]] = frozenset({RoundRobinWriter, TensorDictRoundRobinWriter})
#: the decisions made, by the parts' types (they depend on nothing else)
_DECIDED: dict[tuple[type, ...], bool] = {}


def can_reserve(writer: Writer, sampler: Sampler, sample_unit: SampleUnit) -> bool:
    """Whether a write through these parts may reserve its rows and copy them outside the lock.

    The writer's counters must be shared cells (a ``compilable`` writer's are
    traced), the sampler must draw from slots only, and the sample unit must
    keep no state of writes (its ``extend`` is the base's no-op).
    """
    key = (type(writer), type(writer.counters), type(sampler), type(sample_unit))
    known = _DECIDED.get(key)
    if known is None:
        known = _DECIDED[key] = (
            type(writer) in _RING_WRITERS
            and not issubclass(key[1], LocalCounters)
            and type(sampler) in _SLOT_SAMPLERS
            and type(sample_unit).extend is SampleUnit.extend
        )
    return known


def redraws_freely(sampler: Sampler) -> bool:
    """Whether a batch drawn again is as likely as the first (a draw moves only the RNG)."""
    return type(sampler) is RandomSampler
