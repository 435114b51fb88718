"""Clients on the owner's node write (and uniformly sample) without a call to the actor.

A Ray call costs a round trip through the raylet (about 0.65 ms on the
development machine), more than writing 1,000 rows in process. So a client
on the actor's node maps the hosted buffer instead
(:meth:`~rbdata.buffers._shared_handle._SharedHandle.export_shared`: rows,
counters and lock in named shared memory) and runs ``add``/``extend`` there
itself; the owner's sampler catches up with those writes before its next
draw, exactly as with a ``torch.multiprocessing`` child of a shared buffer.
With a plain :class:`~rbdata.RandomSampler` and no transform, the client
also samples from the map (uniform draws need no state the owner keeps).

:class:`DirectExport` is the owner's side: it pickles the buffer once per
epoch and bumps the epoch, a counter in shared memory that clients read
before every direct call, whenever a call replaces or reshapes the buffer as
a whole (``empty``, ``load_state_dict``, ``loads``, ``set_*``, transforms...):
a client whose map is stale asks again, through the actor.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from rbdata.samplers import RandomSampler
from rbdata.sharing.counters import SharedCounters
from rbdata.sharing.handle import dump_shared, named_sharing

__all__ = ["DirectExport", "DirectHandle"]

#: Whole-buffer calls that leave a client's map valid (they only read).
_READS = frozenset(
    {"__getitem__", "read_all_in_order", "state_dict", "dumps", "register_save_hook"}
)


class DirectHandle(NamedTuple):
    """What a client maps (pickled with ``ForkingPickler``: shared memory by name).

    Attributes:
        buffer: the exported buffer's bytes.
        epoch: the shared epoch counter (``epoch[0]``).
        at: the epoch the buffer was exported at (the map is stale once it moved).
        pid: the owner's process id (the client checks it is alive while waiting for its lock).
        reads: whether the client may sample from the map too (uniform sampler, no transform).
    """

    buffer: bytes
    epoch: SharedCounters
    at: int
    pid: int
    reads: bool


class DirectExport:
    """The owner's exports of its buffer, and their epoch (see the module docstring).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> from rbdata.service.server.direct import DirectExport
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(8))
        >>> export = DirectExport()
        >>> export.handle(rb, True)  # nothing written: ask again later
        (None, True)
        >>> _ = rb.extend(torch.arange(4))
        >>> handle, _ = export.handle(rb, True)
        >>> export.invalidate("empty")
        >>> export.handle(rb, False)  # this owner offers no maps
        (None, False)
    """

    def __init__(self) -> None:
        self._epoch: SharedCounters | None = None
        self._handle: bytes | None = None

    def handle(self, buffer: Any, offered: bool) -> tuple[bytes | None, bool]:
        """``(handle, retry)``: the pickled :class:`DirectHandle`, or None and whether to retry."""
        if not offered:
            return None, False
        with buffer.lock:
            if self._handle is None:
                if not buffer.initialized or not len(buffer.storage):
                    return None, True  # nothing written yet: a later write may make it mappable
                if buffer.export_reason() is not None:
                    return None, False  # the buffer's make-up rules a map out for good
                data = buffer.export_shared()
                if data is None:
                    return None, False
                self._handle = self._pickle(
                    data, reads=type(buffer.sampler) is RandomSampler and not len(buffer.transform)
                )
            return self._handle, True

    def invalidate(self, name: str) -> None:
        """A whole-buffer call ``name`` is about to run (the buffer's lock held)."""
        if name in _READS or self._epoch is None:
            return
        self._epoch[0] += 1
        self._handle = None

    def _pickle(self, data: bytes, reads: bool) -> bytes:
        with named_sharing():
            if self._epoch is None:
                self._epoch = SharedCounters([0])
                self._epoch.share()
            return dump_shared(DirectHandle(data, self._epoch, self._epoch[0], os.getpid(), reads))
