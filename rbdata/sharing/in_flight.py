"""Rows a writer process copies outside the shared lock, and the reservations made lately.

Several processes extending one shared buffer would queue on its lock for the
whole write. A ring write instead *reserves* its rows under the lock (the
cursor, counters and generations move on, as for a write) and copies them
after releasing it, so the copies of several writers run at once. While a
copy runs, its rows are *in flight*: :class:`InFlightRows` keeps them in a
small table in shared memory, one slot per copy, with the writer's pid.

- Whoever takes the lock to do anything else (a write that is not reserved,
  ``empty``, ``state_dict``, a locked read) first waits until no row is in
  flight (:meth:`InFlightRows.drain`): it sees every reserved row written, as
  with one lock held for whole writes. A slot whose writer died (named by
  pid and start time, :mod:`.liveness`: neither a zombie nor a reused pid
  passes for it) is *reclaimed* then (:mod:`.reclaim`): its rows never
  become visible, the rows reserved after it move down over them, and the
  next writer goes on.
- A lock-free reader takes a :meth:`InFlightRows.snapshot` before copying
  rows and keeps its copy only if none of its rows was in flight then or
  reserved since (:meth:`InFlightRows.touched`), which the log of the last
  :data:`LOG` reservations tells, in order of a sequence number.

The order of the stores (x86-64's, see :mod:`.lock`): a reservation
writes its slot, then its log entry, then the sequence number, then copies;
the copy done, it frees its slot. A reader reads the sequence number, then
the slots, copies, then reads the sequence number and the log again.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from typing import Any, cast

import torch

from rbdata.sharing.counters import SharedCounters
from rbdata.sharing.liveness import alive, this_process
from rbdata.sharing.ring import Ranges, ring_ranges

__all__ = [
    "LOG",
    "SLOTS",
    "InFlightRows",
    "Ranges",
    "Reclaim",
    "RowProbe",
    "Snapshot",
    "ring_ranges",
]

_log = logging.getLogger(__name__)

SLOTS = 16  # copies in flight at once (a writer finding none free writes under the lock)
LOG = 64  # reservations a reader can look back over (more during one copy: read again)
# The cells: the sequence number; the slots' writer pids (0: free), side by side, so that
# "which slots are busy" reads two cache lines and a writer's stores into its own slot do
# not touch them; the slots; the log. A slot: row ranges [a, b), [c, d), the writer's start
# time, the phase (claimed, reserved, overwritten under the lock) and the journal (the
# counters before the reservation or the write moved them).
_PID0 = 1  # cell 0 is the sequence number
_WIDTH = 9
_START, _PHASE, _JOURNAL = 4, 5, 6  # offsets in a slot
_CLAIMED, _RESERVED, _LOCKED = 1, 2, 3
_ENTRY = 4  # a log entry: the two ranges
_SLOT0 = _PID0 + SLOTS
_LOG0 = _SLOT0 + SLOTS * _WIDTH
_ALIVE_CHECK_S = 0.01  # a drain checks the writers of the slots it waits on this often
_ORPHAN_CHECK_S = 0.01  # a lock-free length looks for dead writers at most this often
_READER_WAIT_S = 0.01  # a lock-free reader waits this long for rows in flight, then locks
_LISTED = 4096  # a probe of at most this many rows checks ranges by bisection in Python
_IDLE = bytes(8 * SLOTS)  # the slots' pid cells when no copy is in flight (int64 zeros)

#: ``(sequence number, the ranges in flight)`` before a lock-free copy
Snapshot = tuple[int, list[Ranges]]
#: the counters a reservation moves, as they were before: cursor, write count, length
Journal = tuple[int, int, int]
#: what the lock's holder does with the ranges a dead writer reserved (:mod:`.reclaim`):
#: with the journal when the writer died while reserving (the counters go back to it); the
#: flag is true for rows it was overwriting under the lock (:meth:`InFlightRows.overwriting`)
Reclaim = Callable[[Ranges, "Journal | None", bool], None]


def _overlap(ranges: Ranges, a: int, b: int, c: int, d: int) -> bool:
    """Whether ``ranges`` share a row with ``[a, b)`` or ``[c, d)``."""
    ra, rb, rc, rd = ranges
    return (ra < b and a < rb) or (ra < d and c < rb) or (rc < b and a < rd) or (rc < d and c < rd)


class RowProbe:
    """The rows a lock-free reader copies, sorted once for every range check of its read.

    A reader checks its rows against the ranges in flight before and after
    each copy: sorted once, each range costs two bisections (a
    ``searchsorted`` for large batches) instead of a comparison per row.

    Args:
        rows: the rows read (None: any row, so every range counts).

    Examples:
        >>> probe = RowProbe(torch.tensor([9, 3, 40]))
        >>> probe.hits([(4, 9, 0, 0)]), probe.hits([(4, 10, 0, 0)])
        (False, True)
        >>> RowProbe(None).hits([(0, 1, 0, 0)])  # any row
        True
    """

    def __init__(self, rows: torch.Tensor | None) -> None:
        self._sorted = None if rows is None else rows.reshape(-1).sort().values
        self._listed: list[int] | None = None
        if self._sorted is not None and self._sorted.numel() <= _LISTED:
            self._listed = self._sorted.tolist()

    def hits(self, ranges: list[Ranges]) -> bool:
        """Whether a row of the probe lies in one of ``ranges`` (False when there are none)."""
        if not ranges:
            return False
        if self._sorted is None:
            return True
        listed = self._listed
        if listed is None:
            bounds = torch.tensor(ranges, dtype=self._sorted.dtype).view(-1)
            at = torch.searchsorted(self._sorted, bounds).view(-1, 2)
            return bool((at[:, 1] > at[:, 0]).any())
        for a, b, c, d in ranges:
            for low, high in ((a, b), (c, d)):
                i = bisect.bisect_left(listed, low)
                if i < len(listed) and listed[i] < high:
                    return True
        return False


class InFlightRows:
    """The in-flight table and the reservation log of a shared buffer (see the module docstring).

    Its cells are :class:`~rbdata.sharing.counters.SharedCounters`, shared:
    pickled for another process, it travels as their shared tensor, and every
    process sees the same table.

    Examples:
        >>> rows = InFlightRows()
        >>> before = rows.snapshot()
        >>> slot = rows.claim((0, 4, 0, 0))  # under the buffer's lock
        >>> rows.touched(before, RowProbe(torch.tensor([3, 9]))), rows.touched(
        ...     before, RowProbe(torch.tensor([9]))
        ... )
        (True, False)
        >>> rows.release(slot)  # the copy is done
        >>> rows.busy()
        False
    """

    def __init__(self) -> None:
        self._counters = SharedCounters([0] * (_LOG0 + LOG * _ENTRY))
        self._counters.share()  # pickled, the table travels as its shared tensor
        self._bind()

    def _bind(self) -> None:
        self._cells = self._counters.cells
        # the slots' pid cells, viewed once: "is any copy in flight" is one byte compare
        # (every writer asks before it reserves, every lock-free reader before it copies)
        self._pids = memoryview(cast(Any, self._cells))[_PID0:_SLOT0]
        self._looked = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {"counters": self._counters}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._counters = state["counters"]
        self._bind()

    @property
    def reservations(self) -> int:
        """How many reservations were made (by every process)."""
        return self._cells[0]

    # ------------------------------------------------------------ writers
    def claim(self, ranges: Ranges, journal: Journal = (0, 0, 0)) -> int | None:
        """Mark ``ranges`` in flight and log them (the lock held): the slot, or None.

        ``journal`` holds the counters the reservation is about to move: a
        writer that dies before :meth:`reserved` leaves them to be restored.

        None when no slot is free, or when a copy still in flight covers some
        of ``ranges`` (the cursor lapped a slow writer in a small ring): two
        copies into one row would tear it. The caller then writes under the
        lock, whose drain waits for that copy.
        """
        cells = self._cells
        pids = self._pids.tolist()  # every slot's pid, read once
        if 0 not in pids:
            return None
        if any(pids):  # copies in flight: none may cover these rows
            for slot, busy in enumerate(pids):
                base = _SLOT0 + slot * _WIDTH
                if busy and _overlap(ranges, *cells[base : base + 4]):
                    return None
        free = pids.index(0)
        base = _SLOT0 + free * _WIDTH
        a, b, c, d = ranges
        pid, start = this_process()
        # the slot's fields, its pid (which makes it busy) last
        cells[base], cells[base + 1], cells[base + 2], cells[base + 3] = a, b, c, d
        cells[base + _START], cells[base + _PHASE] = start, _CLAIMED
        j = base + _JOURNAL
        cells[j], cells[j + 1], cells[j + 2] = journal
        cells[_PID0 + free] = pid
        seq = cells[0]
        entry = _LOG0 + (seq % LOG) * _ENTRY
        cells[entry], cells[entry + 1], cells[entry + 2], cells[entry + 3] = a, b, c, d
        cells[0] = seq + 1
        return free

    def overwriting(self, ranges: Ranges, cursor: int, count: int, length: int) -> int | None:
        """Journal a write made under the lock, before it copies ``ranges``: the slot, or None.

        A writer holding the lock for a whole write (a prioritized, slice,
        transform or consume-after-n write) overwrites committed rows once the
        ring has wrapped; killed mid-copy, it would leave them torn. The slot
        names the rows and the counters before the write (``cursor``,
        ``count``: the writer's; ``length``: the storage's), so the next
        holder (told of the death by the kernel) drops the write
        (:func:`~.reclaim.reclaim` with ``locked``). The caller frees it with
        :meth:`release` once the write is done. A handful of stores: the lock
        is held and drained, so every slot is free and no reader looks at the
        log (the version is odd); None only if no slot is free all the same.
        """
        cells = self._cells
        free = 0
        if cells[_PID0]:  # not drained (a hold that skipped it): look for a free slot
            pids = self._pids.tolist()
            if 0 not in pids:
                return None
            free = pids.index(0)
        base = _SLOT0 + free * _WIDTH
        cells[base], cells[base + 1], cells[base + 2], cells[base + 3] = ranges
        pid, start = this_process()
        cells[base + _START] = start
        cells[base + _PHASE] = _LOCKED
        j = base + _JOURNAL
        cells[j], cells[j + 1], cells[j + 2] = cursor, count, length
        cells[_PID0 + free] = pid  # last: the slot is taken once it names its writer
        return free

    def reserved(self, slot: int) -> None:
        """The counters of ``slot``'s reservation moved (the lock held): the copy comes next."""
        self._cells[_SLOT0 + slot * _WIDTH + _PHASE] = _RESERVED

    def release(self, slot: int) -> None:
        """The copy of ``slot`` is done (no lock needed: one store)."""
        self._cells[_PID0 + slot] = 0

    # ------------------------------------------------------------ the lock's holders
    def busy(self) -> bool:
        """Whether some copy is in flight."""
        return self._pids.tobytes() != _IDLE

    def drain(self, reclaim: Reclaim | None = None) -> None:
        """Wait (the lock held, so no new reservation) until no copy is in flight.

        Waits for live writers only: once every busy slot's writer is gone
        (checked every :data:`_ALIVE_CHECK_S` of waiting), each is reclaimed
        by ``reclaim(ranges, journal)``, the newest reservation first, then
        freed (without ``reclaim``: freed at once with a warning, its rows
        may be torn).
        """
        if not self.busy():
            return
        spins = 0
        checked = time.monotonic()
        while self.busy():
            spins += 1
            time.sleep(0 if spins < 100 else 1e-5)
            if time.monotonic() - checked >= _ALIVE_CHECK_S:
                checked = time.monotonic()
                self._free_dead(reclaim)

    def orphaned(self) -> bool:
        """Whether a writer died with rows in flight (looked at most every 10 ms)."""
        if not self.busy():
            return False
        now = time.monotonic()
        if now - self._looked < _ORPHAN_CHECK_S:
            return False
        self._looked = now
        return bool(self._dead())

    def _dead(self) -> list[tuple[int, int]]:
        """``(reservation order, slot)`` of the slots whose writer is gone, newest first."""
        cells = self._cells
        dead = []
        for slot, pid in enumerate(self._pids.tolist()):
            if pid and not alive(pid, cells[_SLOT0 + slot * _WIDTH + _START]):
                dead.append((self._order(slot), slot))
        return sorted(dead, reverse=True)

    def _order(self, slot: int) -> int:
        """How recent the reservation of ``slot`` is (larger: newer), from the log."""
        cells = self._cells
        base = _SLOT0 + slot * _WIDTH
        ranges = tuple(cells[base + i] for i in range(4))
        seq = cells[0]
        for back in range(min(seq, LOG)):
            entry = _LOG0 + ((seq - 1 - back) % LOG) * _ENTRY
            if tuple(cells[entry + i] for i in range(4)) == ranges:
                return seq - back
        return 0

    def _free_dead(self, reclaim: Reclaim | None) -> None:
        cells = self._cells
        dead = self._dead()
        busy = sum(1 for pid in self._pids.tolist() if pid)
        if reclaim is not None and len(dead) < busy:
            return  # a live copy still runs: reclaiming would move its rows half written
        for _, slot in dead:
            base = _SLOT0 + slot * _WIDTH
            pid = cells[_PID0 + slot]
            ranges = (cells[base], cells[base + 1], cells[base + 2], cells[base + 3])
            journal = None
            phase = cells[base + _PHASE]
            if phase != _RESERVED:  # died reserving or overwriting: the counters go back
                j = base + _JOURNAL
                journal = (cells[j], cells[j + 1], cells[j + 2])
            if reclaim is None:
                _log.warning(
                    "writer process %d died copying rows [%d, %d) and [%d, %d) of a shared "
                    "buffer: those rows may be torn",
                    pid,
                    *ranges,
                )
            else:
                _log.warning(
                    "writer process %d died before its rows [%d, %d) and [%d, %d) of a "
                    "shared buffer were committed: they are dropped",
                    pid,
                    *ranges,
                )
                reclaim(ranges, journal, phase == _LOCKED)
            cells[_PID0 + slot] = 0

    # ------------------------------------------------------------ lock-free readers
    def wait_until_copied(self, probe: RowProbe) -> None:
        """Wait (lock-free, at most :data:`_READER_WAIT_S`) for no row of ``probe`` in flight."""
        deadline = time.monotonic() + _READER_WAIT_S
        spins = 0
        while self.touched(self.snapshot(), probe) and time.monotonic() < deadline:
            spins += 1
            time.sleep(0 if spins < 100 else 1e-5)

    def holds(self, rows: torch.Tensor) -> bool:
        """Whether one of ``rows`` (a 1-D tensor of row numbers) is being copied now."""
        active = self.snapshot()[1]
        return bool(active) and RowProbe(rows).hits(active)

    def snapshot(self) -> Snapshot:
        """What a lock-free reader takes before copying rows (see :meth:`touched`)."""
        cells = self._cells
        seq = cells[0]
        if self._pids.tobytes() == _IDLE:  # the common case: nothing in flight
            return seq, []
        active: list[Ranges] = [
            (cells[base], cells[base + 1], cells[base + 2], cells[base + 3])
            for base, pid in zip(range(_SLOT0, _LOG0, _WIDTH), self._pids.tolist(), strict=True)
            if pid
        ]
        return seq, active

    def touched(self, before: Snapshot, probe: RowProbe) -> bool:
        """Whether a row of ``probe`` was in flight at ``before`` or reserved since.

        True also when more reservations were made since than the log holds.
        """
        seq, ranges = before
        cells = self._cells
        now = cells[0]
        if now - seq > LOG:
            return True
        if now != seq:
            ranges = ranges + [
                (cells[e], cells[e + 1], cells[e + 2], cells[e + 3])
                for e in (_LOG0 + (s % LOG) * _ENTRY for s in range(seq, now))
            ]
            if cells[0] - seq > LOG:  # the log moved on while read
                return True
        return probe.hits(ranges)
