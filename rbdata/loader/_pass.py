"""The pass engine: what a ReplayDataset has sampled, gathered and handed out.

One ``_PassEngine`` per dataset holds the resume-relevant state under its
lock:

- ``pending``: records sampled but not handed out yet, oldest first (the
  prefetched batches, and batches carried over from an iterator closed
  early). Their index and info survive a checkpoint; their data is gathered
  again after a resume.
- ``position``: batches handed out in the current pass; ``pass_over``: the
  last one handed out ended a sampler-driven pass.
- ``recent``: the last handed-out records, so that a consumer that holds
  batches back (Lightning looks one batch ahead) can checkpoint as if they had
  not been handed out (``ReplayDataset.held_back``).

Sampling a record and appending it to ``pending`` happen under the buffer's
lock, and a state snapshot takes that lock too, so a snapshot (sampler + RNG
+ pending) is consistent whatever the prefetch thread is doing. Lock order:
the buffer's lock, then the engine lock (held briefly, so handing a batch
out never waits for a collector's write); nothing waits on the buffer's
condition while holding either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import is_tensor_collection

from rbdata._component.prefetch_state import draw_record, read_draw_records
from rbdata.buffers.protocol import Draw, aligned_info
from rbdata.loader._batch import as_replay_batch, place
from rbdata.loader._settings import DatasetSettings

_WAIT_SLICE_S = 0.1
#: seconds between two log lines of a wait for ``min_size``
_LOG_EVERY_S = 5.0

_log = logging.getLogger("rbdata.loader")


@dataclass(eq=False)
class _Record:
    """One sampled batch: where it was drawn from and, once gathered, its data."""

    index: torch.Tensor
    info: dict[str, Any]
    ends_pass: bool
    batch: Any = field(default=None, repr=False)
    ahead: bool = False  # gathered before its hand-out: re-check the row filters then


class _PassEngine:
    """Samples, gathers and hands out the batches of one dataset (see the module doc)."""

    def __init__(self, dataset: DatasetSettings) -> None:
        self.ds = dataset
        self.buffer = dataset.buffer
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.waiting = 0  # threads inside wait(): hand-outs notify only when someone waits
        self.pending: deque[_Record] = deque()
        self.recent: deque[_Record] = deque()
        self.position = 0
        self.pass_over = False
        self.producer_done = False
        self.error: BaseException | None = None
        self.sampled_batches = 0

    # ------------------------------------------------------------ passes
    def begin_pass(self, resume: bool) -> None:
        """Start a pass (a fresh one, or the loaded one when ``resume``)."""
        with self.lock:
            if not resume:
                self.position = 0
                self.pass_over = False
                self.recent.clear()
            self.producer_done = False
            self.error = None

    def end_pass(self) -> None:
        """The pass is over (StopIteration was raised): the next one starts fresh."""
        with self.lock:
            self.position = 0
            self.pass_over = False
            self.producer_done = False
            self.recent.clear()

    # ------------------------------------------------------------ producing
    def produce(self, stop: threading.Event) -> _Record | None:
        """Sample the next record of the pass and append it to ``pending``.

        Waits (for ``min_size``, the rate limiter, or new data with ``timeout``)
        happen here, on the calling thread, and end early when ``stop`` is set.

        Returns:
            The record (not gathered yet), or None when the pass has no more
            batches to sample (``producer_done`` is then set).
        """
        ds = self.ds
        while not stop.is_set():
            with self.lock:
                if self._pass_fully_sampled():
                    break
            if not self._wait_ready(stop):
                break
            with self.buffer.lock:
                with self.lock:
                    if self._pass_fully_sampled():
                        break
                write_count = None if ds.timeout is None else self.buffer.write_count
                draw = self._draw(ds.batch_size)
                index = draw.index
                if index.numel():
                    ends = ds.num_batches is None and draw.ends_pass
                    record = _Record(index, draw.info, ends)
                    with self.lock:
                        self.pending.append(record)
                        self.sampled_batches += 1
                    if ds.rate_limiter is not None:
                        ds.rate_limiter.record_sample(index.numel())
                    return record
            # Nothing sampleable: the buffer is empty or exhausted.
            if write_count is None or not self._wait_for_write(stop, write_count):
                break
        with self.lock:
            self.producer_done = True
            self.notify()
        return None

    def _pass_fully_sampled(self) -> bool:
        if self.pass_over or (self.pending and self.pending[-1].ends_pass):
            return True
        num_batches = self.ds.num_batches
        return num_batches is not None and self.position + len(self.pending) >= num_batches

    def _draw(self, batch_size: int) -> Draw:
        if len(self.buffer) == 0:
            return Draw.empty()
        return self.buffer.draw(batch_size)

    def _wait_ready(self, stop: threading.Event) -> bool:
        """Wait for ``min_size`` items and the rate limiter's go; False: stop or timed out."""
        ds, buffer = self.ds, self.buffer
        limiter = ds.rate_limiter
        if limiter is None and ds.min_size == 0:
            return True

        def ready() -> bool:
            if len(buffer) < ds.min_size:
                return False
            return limiter is None or limiter.can_sample(buffer.write_count)

        if ready():
            return True
        start = time.monotonic()
        limited = len(buffer) >= ds.min_size
        ok = self._wait(stop, ready, None if limited else self._min_size_report)
        if limited and limiter is not None:
            limiter.record_sample_wait(time.monotonic() - start)
        # Learning never started (no batch sampled yet): an error. Once it has, a buffer
        # that stops getting data (or shrinks under consumption) ends the pass quietly.
        if not ok and not stop.is_set() and len(buffer) < ds.min_size and not self.sampled_batches:
            raise TimeoutError(
                f"ReplayDataset waited for min_size={ds.min_size} items, but the buffer holds "
                f"{len(buffer)} and received no write for timeout={ds.timeout} s; start the "
                f"collector that fills it, lower min_size, or raise timeout."
            )
        return ok

    def _min_size_report(self, waited_s: float) -> None:
        """Log what a wait for ``min_size`` waits for and what the buffer has (every few s)."""
        ds = self.ds
        _log.warning(
            "ReplayDataset: waiting %.0f s for min_size=%d items; the buffer holds %d "
            "(write_count %d)%s",
            waited_s,
            ds.min_size,
            len(self.buffer),
            self.buffer.write_count,
            " and waits without a bound (timeout=None)"
            if ds.timeout is None
            else f"; gives up after {ds.timeout:g} s without a write",
        )

    def _wait_for_write(self, stop: threading.Event, write_count: int) -> bool:
        """Wait (``timeout`` at most) for a write after ``write_count``; False if none came."""
        return self._wait(stop, lambda: self.buffer.write_count != write_count)

    def _wait(
        self,
        stop: threading.Event,
        predicate: Callable[[], bool],
        report: Callable[[float], None] | None = None,
    ) -> bool:
        """Wait on the buffer's condition until ``predicate()``; False on stop or timeout.

        Without ``timeout`` the wait is unbounded; with it, the clock restarts
        whenever new data arrives, and the wait fails after ``timeout`` seconds
        without any write. Waits are sliced so that ``stop`` is noticed quickly.
        ``report`` (given the seconds waited) is called every ``_LOG_EVERY_S``.
        """
        buffer, timeout = self.buffer, self.ds.timeout
        seen = buffer.write_count
        last_data = start = time.monotonic()
        next_report = start + _LOG_EVERY_S
        while not stop.is_set():
            if predicate():
                return True
            now = time.monotonic()
            if report is not None and now >= next_report:
                report(now - start)
                next_report = now + _LOG_EVERY_S
            count = buffer.write_count
            if count != seen:
                seen, last_data = count, now
            wait_s = _WAIT_SLICE_S
            if timeout is not None:
                left = timeout - (now - last_data)
                if left <= 0:
                    return False
                wait_s = min(wait_s, left)

            def woken(count: int = seen) -> bool:
                return stop.is_set() or buffer.write_count != count or predicate()

            buffer.wait_for_data(woken, wait_s)
        return False

    def wait(self) -> None:
        """Wait for a notification (call under the lock)."""
        self.waiting += 1
        try:
            self.cond.wait()
        finally:
            self.waiting -= 1

    def notify(self) -> None:
        """Wake the threads waiting in :meth:`wait`, if any (call under the lock)."""
        if self.waiting:
            self.cond.notify_all()

    def wake_waiters(self) -> None:
        """Wake threads waiting on this engine or on the buffer, so they see a stop request."""
        with self.cond:
            self.cond.notify_all()
        self.buffer.notify_waiters()

    # ------------------------------------------------------------ gathering
    def next_ungathered(self) -> _Record | None:
        """The oldest pending record whose data is not gathered yet (call under the lock)."""
        for record in self.pending:
            if record.batch is None:
                return record
        return None

    def gather(self, record: _Record, ahead: bool) -> None:
        """Gather ``record``'s data (a copy), pin it and move it as the dataset asks."""
        ds = self.ds
        batch = as_replay_batch(self.buffer.gather(Draw(record.index, dict(record.info))))
        if ds.pins_batches or ds.batch_device is not None:
            batch = place(batch, ds.pins_batches, ds.batch_device)
        with self.lock:
            record.batch = batch
            record.ahead = ahead
            self.notify()

    # ------------------------------------------------------------ handing out
    def hand_out(self, record: _Record) -> Any:
        """Hand out ``record`` (the oldest pending one): re-check filters, count it."""
        batch = record.batch  # already a ReplayBatch (see gather)
        if record.ahead and _has_rows(batch):
            refiltered = self.buffer.refilter(batch)
            if refiltered is not batch:
                batch = as_replay_batch(refiltered)
        with self.lock:
            self.pending.popleft()
            record.batch = None
            self.position += 1
            self.pass_over = record.ends_pass
            held = self.ds.held_back
            if held:
                self.recent.append(record)
                while len(self.recent) > held:
                    self.recent.popleft()
            self.notify()
        if self.ds.return_info:
            return batch, aligned_info(batch, record.info)
        return batch

    # ------------------------------------------------------------ state
    def snapshot(self) -> dict[str, Any]:
        """Pass position and pending records (call under the lock)."""
        held = list(self.recent)[-self.ds.held_back :] if self.ds.held_back else []
        records = [*held, *self.pending]
        return {
            "position": self.position - len(held),
            "pass_over": self.pass_over and not held,
            "pending": [draw_record(r.index, r.info, r.ends_pass) for r in records],
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Load :meth:`snapshot`'s output (call under the lock, no thread running)."""
        self.pending = deque(
            _Record(index, info, ends_pass)
            for index, info, ends_pass in read_draw_records(state["pending"], "state['pending']")
        )
        self.recent.clear()
        self.position = int(state["position"])
        self.pass_over = bool(state["pass_over"])
        self.producer_done = False
        self.error = None


def _has_rows(batch: Any) -> bool:
    if not is_tensor_collection(batch):
        return True
    shape = batch.batch_size
    return len(shape) == 0 or shape[0] > 0
