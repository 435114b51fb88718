"""The end-of-trajectory flags every part reads (one source for trajectories and checkpointers).

Examples:
    >>> from rbdata._component.done_keys import DEFAULT_DONE_KEYS
    >>> DEFAULT_DONE_KEYS
    ('done', 'truncated', 'terminated')
"""

from __future__ import annotations

from rbdata._component.checks import NestedKey

__all__ = ["DEFAULT_DONE_KEYS"]

#: torchrl's end-of-trajectory flags (``torchrl.data.DEFAULT_DONE_KEYS``): the entries, at
#: the root or under ``"next"``, whose truth ends a trajectory
DEFAULT_DONE_KEYS: tuple[NestedKey, ...] = ("done", "truncated", "terminated")
