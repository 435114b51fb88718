"""SampleToInsertRatio: keep the learner's sampling in step with the collector's inserts."""

from __future__ import annotations

import threading
import time
from typing import Any

from torch.utils.hooks import RemovableHandle

from rbdata.buffers.protocol import ServableBuffer

__all__ = ["SampleToInsertRatio"]


class SampleToInsertRatio:
    """Keep ``sampled items / inserted items`` near ``samples_per_insert``.

    A learner that samples much faster than its collector inserts overfits on
    a small buffer; a collector that inserts much faster than the learner
    samples wastes experience. This limiter (Reverb's ``SampleToInsertRatio``,
    simplified) is shared by both sides:

    - the learner (a :class:`~rbdata.loader.ReplayDataset` built with
      ``samples_per_insert=`` or ``rate_limiter=``) may draw a batch while
      ``sampled < samples_per_insert * inserted * (1 + tolerance)`` and the
      buffer holds ``min_size_to_sample`` items; otherwise it waits for the
      collector to insert more;
    - a collector may insert while :meth:`can_insert` holds:
      ``inserted < min_size_to_sample`` or
      ``sampled >= samples_per_insert * inserted * (1 - tolerance)``;
      :meth:`wait_for_learner` blocks until then.

    The two conditions never fail together (the learner's bound is above the
    collector's), so the pair cannot deadlock. ``inserted`` is the buffer's
    ``write_count``; ``sampled`` counts the items the dataset drew (before any
    row filter). Waits are counted and timed; they show in ``buffer.stats()``
    once a dataset has attached the limiter to its buffer.

    Args:
        samples_per_insert: the target number of sampled items per inserted
            item (> 0).
        tolerance: the allowed relative deviation from the target (>= 0).
            Defaults to 0.1 (10%).
        min_size_to_sample: the learner does not sample before the buffer has
            received this many items, and collectors never wait before.
            Defaults to 1.

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer, ReplayDataset
        >>> from rbdata.loader import SampleToInsertRatio
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
        >>> limiter = SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=8)
        >>> ds = ReplayDataset(rb, rate_limiter=limiter, timeout=0.05)
        >>> _ = rb.extend(torch.arange(8))
        >>> len(list(ds))  # 8 items inserted allow 8 * 1.1 sampled items: 3 batches of 4
        3
        >>> limiter.can_insert()
        True
    """

    def __init__(
        self, samples_per_insert: float, tolerance: float = 0.1, min_size_to_sample: int = 1
    ) -> None:
        if isinstance(samples_per_insert, bool) or not isinstance(samples_per_insert, int | float):
            raise TypeError(
                f"samples_per_insert must be a number, got {type(samples_per_insert).__name__}."
            )
        if not samples_per_insert > 0:
            raise ValueError(f"samples_per_insert must be > 0, got {samples_per_insert!r}.")
        if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance < 0:
            raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}.")
        if (
            isinstance(min_size_to_sample, bool)
            or not isinstance(min_size_to_sample, int)
            or min_size_to_sample < 1
        ):
            raise ValueError(f"min_size_to_sample must be an int >= 1, got {min_size_to_sample!r}.")
        self.samples_per_insert = float(samples_per_insert)
        self.tolerance = float(tolerance)
        self.min_size_to_sample = min_size_to_sample
        self._cond = threading.Condition()
        self._buffer: ServableBuffer | None = None
        self._stats_handle: RemovableHandle | None = None
        self._sampled = 0
        self._sample_waits = 0
        self._sample_wait_s = 0.0
        self._insert_waits = 0
        self._insert_wait_s = 0.0

    # ------------------------------------------------------------ binding
    def attach(self, buffer: ServableBuffer) -> None:
        """Count the inserts of ``buffer`` (its ``write_count``) and report in its ``stats()``.

        Called by :class:`~rbdata.loader.ReplayDataset`; a limiter serves one buffer.

        Raises:
            ValueError: if the limiter is already attached to another buffer.
        """
        if self._buffer is buffer:
            return
        if self._buffer is not None:
            raise ValueError(
                "rate_limiter is already attached to another buffer; build one "
                "SampleToInsertRatio per buffer."
            )
        self.reattach(buffer)

    def reattach(self, buffer: ServableBuffer) -> None:
        """Serve ``buffer`` (an unpickled copy of the one attached before) and report to it."""
        self._buffer = buffer
        self._stats_handle = buffer.register_stats_source(self.stats)

    @property
    def inserted(self) -> int:
        """Items inserted into the attached buffer so far (its ``write_count``; 0 unattached)."""
        return 0 if self._buffer is None else int(self._buffer.write_count)

    @property
    def sampled(self) -> int:
        """Items sampled by the learner so far."""
        return self._sampled

    # ------------------------------------------------------------ learner side
    def can_sample(self, inserted: int | None = None) -> bool:
        """Whether the learner may draw its next batch now."""
        inserted = self.inserted if inserted is None else inserted
        if inserted < self.min_size_to_sample:
            return False
        return self._sampled < self.samples_per_insert * inserted * (1.0 + self.tolerance)

    def record_sample(self, n: int) -> None:
        """Count ``n`` sampled items and wake collectors waiting for the learner."""
        with self._cond:
            self._sampled += int(n)
            self._cond.notify_all()

    def record_sample_wait(self, seconds: float) -> None:
        """Count one wait of the learner (``seconds`` long) for the collector."""
        with self._cond:
            self._sample_waits += 1
            self._sample_wait_s += seconds

    # ------------------------------------------------------------ collector side
    def can_insert(self) -> bool:
        """Whether a collector may insert now (the learner is not lagging behind)."""
        inserted = self.inserted
        if inserted < self.min_size_to_sample:
            return True
        return self._sampled >= self.samples_per_insert * inserted * (1.0 - self.tolerance)

    def wait_for_learner(self, timeout: float | None = None) -> bool:
        """Block a collector until :meth:`can_insert` holds or ``timeout`` seconds pass.

        Args:
            timeout: the longest wait in seconds (None: no limit).

        Returns:
            :meth:`can_insert` at return (False when the wait timed out).
        """
        if self.can_insert():
            return True
        start = time.monotonic()
        with self._cond:
            # record_sample notifies: the wait ends as soon as the learner caught up.
            ok = self._cond.wait_for(self.can_insert, timeout)
            self._insert_waits += 1
            self._insert_wait_s += time.monotonic() - start
        return ok

    # ------------------------------------------------------------ reporting
    def stats(self) -> dict[str, float | int]:
        """The current ratio and the waits on both sides (merged into ``buffer.stats()``)."""
        inserted = self.inserted
        return {
            "samples_per_insert": self._sampled / inserted if inserted else 0.0,
            "rate_limit_waits": self._sample_waits,
            "rate_limit_wait_s": self._sample_wait_s,
            "rate_limit_insert_waits": self._insert_waits,
            "rate_limit_insert_wait_s": self._insert_wait_s,
        }

    def state_dict(self) -> dict[str, Any]:
        """The sampled-items count (the inserted count is the buffer's own)."""
        return {"sampled": self._sampled}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (missing keys keep their values)."""
        with self._cond:
            self._sampled = int(state_dict.get("sampled", self._sampled))
            self._cond.notify_all()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_cond")
        state.pop("_stats_handle")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cond = threading.Condition()
        self._stats_handle = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(samples_per_insert={self.samples_per_insert}, "
            f"tolerance={self.tolerance}, min_size_to_sample={self.min_size_to_sample})"
        )
