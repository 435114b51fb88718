"""What the two sides agree on besides payloads: reply kinds and the actor's wait group."""

from __future__ import annotations

from dataclasses import dataclass

from rbdata.service.transport.codec import Packed, Payload

__all__ = [
    "DRAW_GROUP",
    "SLOT_MIN_BYTES",
    "WAIT_GROUP",
    "WRITE_GROUP",
    "InSlot",
    "Raised",
    "Reply",
    "ReturnsSelf",
]

#: The actor's concurrency group for blocking waits (a waiting client never blocks a write).
WAIT_GROUP = "wait"
#: the owner's concurrency group of draws: one thread, so that the draws a client keeps in
#: flight are served in the order it sent them (a pass ends with the batch that ended it)
DRAW_GROUP = "draws"
#: the owner's concurrency group of writes: a write held by the rate limiter never takes a
#: thread that reads and priority updates need
WRITE_GROUP = "writes"
#: Replies smaller than this travel inline with Ray's answer (cheaper than a slot).
SLOT_MIN_BYTES = 64 * 1024


class ReturnsSelf:
    """Stands for the hosted buffer when a method returns it (``set_``, ``append_transform``)."""


@dataclass(frozen=True)
class Raised:
    """An exception raised by a hosted-buffer method, carried back as a value.

    Used where one reply holds several results (a group of batches, a channel
    exchange): the caller re-raises ``error`` when it reaches it.
    """

    error: Exception


@dataclass(frozen=True)
class InSlot:
    """A reply written into slot ``slot`` of the caller's ring."""

    slot: int
    packed: Packed


Reply = Payload | InSlot
