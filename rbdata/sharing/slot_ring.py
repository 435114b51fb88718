"""Same-node shared-memory slots: batches handed from the actor to a client without a copy.

A :class:`SlotRing` is one ``/dev/shm`` file holding ``slots`` equal slots of
``slot_bytes`` bytes, followed by one flag byte per slot (0: free, 1: in
use). The owner (the actor) creates it, gathers a batch into a free slot and
returns only the slot's number; the client maps the same file
(:meth:`SlotRing.attach`), views the slot as the batch's tensors and clears
the flag when the last of those tensors is freed. Each flag has one writer
per transition (the owner sets it, the client's holder clears it), so no lock
is shared between the processes; in the owner, threads serving calls at once
take slots under the ring's own lock.

The file's name is removed from ``/dev/shm`` as soon as the client has mapped
it (:meth:`SlotRing.unlink`): the memory lives on while either side maps it,
and nothing is left behind when they exit, however they exit. A ring whose
client never attached is unlinked by :meth:`SlotRing.close`; its name starts
with its creator's ``rbdata-<pid>-<start>-`` (:func:`~.cleanup.creator_prefix`),
so the next sweep removes it if the creator was killed before that.
"""

from __future__ import annotations

import mmap
import os
import threading
import uuid
import weakref
from pathlib import Path

import numpy as np
import torch

from rbdata.sharing.cleanup import creator_prefix

__all__ = ["SHM_DIR", "SlotRing", "SlotRings"]

SHM_DIR = Path("/dev/shm")


class SlotRing:
    """A ring of shared-memory slots (see the module docstring).

    Args:
        path: the ring's file.
        slots: number of slots.
        slot_bytes: bytes per slot.
        create: create the file (the owner) or map an existing one (a client).

    Examples:
        >>> import torch
        >>> from rbdata.sharing.slot_ring import SlotRing
        >>> owner = SlotRing.create(slots=2, slot_bytes=64)
        >>> client = SlotRing.attach(owner.path, 2, 64)
        >>> owner.unlink()
        >>> slot = owner.acquire()
        >>> owner.memory(slot)[:3] = torch.tensor([1, 2, 3], dtype=torch.uint8)
        >>> view = client.view(slot)
        >>> view[:3].tolist(), owner.in_use()
        ([1, 2, 3], 1)
        >>> del view  # the last tensor viewing the slot is freed: the slot is free again
        >>> owner.in_use()
        0
        >>> owner.close(); client.close()
    """

    def __init__(self, path: Path, slots: int, slot_bytes: int, *, create: bool) -> None:
        if slots < 1 or slot_bytes < 1:
            raise ValueError(f"slots and slot_bytes must be >= 1, got {slots} and {slot_bytes}.")
        self.path = path
        self.slots = slots
        self.slot_bytes = slot_bytes
        size = slots * slot_bytes + slots
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self._map: mmap.mmap | None = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._linked = create
        whole = np.frombuffer(self._map, dtype=np.uint8)
        self._flags = whole[slots * slot_bytes :]
        self._memory = torch.from_numpy(whole[: slots * slot_bytes])
        self._next = 0
        self._lock = threading.Lock()  # the owner's threads acquire slots one at a time

    @classmethod
    def create(cls, slots: int, slot_bytes: int) -> SlotRing:
        """Create a new ring file in ``/dev/shm`` (the owner's side)."""
        name = f"{creator_prefix('slots')}{uuid.uuid4().hex}"  # swept if its creator crashes
        return cls(SHM_DIR / name, slots, slot_bytes, create=True)

    @classmethod
    def attach(cls, path: Path | str, slots: int, slot_bytes: int) -> SlotRing:
        """Map the ring the owner created at ``path`` (a client's side)."""
        return cls(Path(path), slots, slot_bytes, create=False)

    @staticmethod
    def available() -> bool:
        """Whether this machine has a ``/dev/shm`` to put rings in."""
        return SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK)

    # ------------------------------------------------------------ owner side
    def acquire(self) -> int | None:
        """Mark a free slot in use and return its number (None when every slot is in use).

        Thread-safe: two threads never get the same slot.
        """
        with self._lock:
            for step in range(self.slots):
                slot = (self._next + step) % self.slots
                if self._flags[slot] == 0:
                    self._flags[slot] = 1
                    self._next = (slot + 1) % self.slots
                    return slot
        return None

    def release(self, slot: int) -> None:
        """Mark ``slot`` free (its holder is done with it)."""
        self._flags[slot] = 0

    def memory(self, slot: int) -> torch.Tensor:
        """The bytes of ``slot`` (a uint8 tensor viewing the shared memory)."""
        start = slot * self.slot_bytes
        return self._memory[start : start + self.slot_bytes]

    def in_use(self) -> int:
        """How many slots are in use."""
        return int(self._flags.sum())

    def unlink(self) -> None:
        """Remove the file's name (the mapped memory stays until both sides unmap it)."""
        if self._linked:
            self.path.unlink(missing_ok=True)
            self._linked = False

    # ----------------------------------------------------------- client side
    def view(self, slot: int) -> torch.Tensor:
        """The bytes of ``slot`` as a tensor whose death marks the slot free again."""
        assert self._map is not None, "the ring is closed"
        start = slot * self.slot_bytes
        holder = np.frombuffer(self._map, dtype=np.uint8, count=self.slot_bytes, offset=start)
        weakref.finalize(holder, SlotRing.release, self, slot)
        return torch.from_numpy(holder)

    def close(self) -> None:
        """Unlink the file if still linked and drop this side's mapping (views keep it alive)."""
        self.unlink()
        self._map = None


class SlotRings:
    """An owner's rings by path (reply rings, clients' write rings): one place forgets them.

    Examples:
        >>> rings = SlotRings()
        >>> rings.close("/nonexistent")  # a ring already forgotten is no error
        >>> rings.close_all()
    """

    def __init__(self) -> None:
        self._rings: dict[str, SlotRing] = {}

    def close(self, path: str) -> None:
        """Forget the ring at ``path`` (its client is gone)."""
        ring = self._rings.pop(path, None)
        if ring is not None:
            ring.close()

    def close_all(self) -> None:
        """Forget every ring (the owner stops)."""
        for path in list(self._rings):
            self.close(path)
