"""What the sharing layer calls on a buffer's components, as protocols (it imports none of them).

The sharing layer sits beneath the storages, writers and samplers: they take
their counters from it, so it cannot import them. It names instead the few
members it uses, and any component that has them fits:

- :class:`Rows`: a storage laid out in rows (reserved writes, reclaims);
- :class:`Cursor`: a writer placing batches at a cursor on its counters;
- :class:`Draws`: a sampler, for what its draws depend on;
- :class:`WriteNotes`: a sample unit, for whether it keeps state of writes;
- :class:`SharesMemory`: a transform whose write state moves to shared memory.

The capabilities the layer asks of a component (:attr:`Cursor.writes_in_ring_order`,
:attr:`Draws.reads_only_length`, :attr:`Draws.draws_independent`,
:attr:`WriteNotes.tracks_trajectories`) are declared on the component's own base
class, in its own terms.

Examples:
    >>> from rbdata import LazyTensorStorage, RandomSampler, RoundRobinWriter, Transition
    >>> isinstance(LazyTensorStorage(4), Rows), isinstance(RoundRobinWriter(), Cursor)
    (True, True)
    >>> isinstance(RandomSampler(), Draws), isinstance(Transition(), WriteNotes)
    (True, True)
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from rbdata.sharing.counters import Counters

__all__ = ["Cursor", "Draws", "Rows", "SharesMemory", "WriteNotes"]


@runtime_checkable
class Rows(Protocol):
    """A storage's rows as the sharing layer reserves, copies and moves them."""

    #: the writer's per-slot generation stamps kept with the rows (None: none)
    slot_generations: torch.Tensor | None

    @property
    def max_size_along_dim0(self) -> int:
        """Capacity in rows, where a ring write wraps around."""

    @property
    def counters(self) -> Counters:
        """The cells ``[filled rows, mutation revision, last slot]``."""

    def batch_leaves(self, data: Any) -> list[torch.Tensor] | None:
        """The checked leaves of ``data``, one per row field (None: not laid out in rows)."""

    def write_leaves(self, start: int, leaves: list[torch.Tensor]) -> None:
        """Copy ``leaves`` into the rows ``start ..`` (counters unchanged)."""

    def get(self, index: Any) -> Any:
        """The rows at ``index`` (an integer tensor here)."""


@runtime_checkable
class Cursor(Protocol):
    """A writer's cursor and write count, on the counters the sharing layer moves."""

    @property
    def counters(self) -> Counters:
        """The cells ``[cursor, write count]``."""

    @property
    def tracks_generations(self) -> bool:
        """Whether a write stamps its slots with a new generation."""

    @property
    def writes_in_ring_order(self) -> bool:
        """Whether a batch goes to the slots from the cursor on, wrapping, and nothing else."""


@runtime_checkable
class Draws(Protocol):
    """What a sampler's draws depend on."""

    @property
    def reads_only_length(self) -> bool:
        """Whether a draw reads nothing of the data but the number of items written."""

    @property
    def draws_independent(self) -> bool:
        """Whether each draw is independent of the others (it moves only the random state)."""


@runtime_checkable
class WriteNotes(Protocol):
    """Whether a sample unit keeps state of the data written."""

    @property
    def tracks_trajectories(self) -> bool:
        """Whether the unit keeps state of the trajectories written (told of each write)."""


@runtime_checkable
class SharesMemory(Protocol):
    """A transform whose write state a shared buffer moves to shared memory."""

    def share_memory_(self) -> Any:
        """Move the write state to shared memory."""
