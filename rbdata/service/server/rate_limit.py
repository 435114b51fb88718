"""The rate limiter enforced by the owner actor, across all the clients of a buffer.

``service_backend_options={"rate_limiter": SampleToInsertRatio(...)}`` makes
the owner (Reverb's rate limiters, rbdata's
:class:`~rbdata.loader.SampleToInsertRatio`) hold:

- a sample (``sample``, the draws of a loader, ``next``) until the buffer
  has received ``min_size_to_sample`` items and ``sampled < samples_per_insert
  * inserted * (1 + tolerance)``; the wait sleeps on the hosted buffer's write
  condition (:meth:`~rbdata.ReplayBuffer.wait_for_data`), so the insert that
  makes it true wakes it;
- an insert (``add``/``extend``) until ``inserted < min_size_to_sample`` or
  ``sampled >= samples_per_insert * inserted * (1 - tolerance)``; the wait
  sleeps on the limiter's condition, which each sample notifies.

The two conditions never fail together, so collectors and learners cannot
deadlock. ``inserted`` is the hosted buffer's ``write_count`` (every client's
writes), ``sampled`` counts the items of every sample served. A wait longer
than ``rate_limiter_timeout`` seconds raises
:class:`~rbdata.errors.RateLimitTimeoutError` in the caller. Waits run in the
concurrency group of their call: samples in the owner's draw group, writes in
its write group, so a blocked sample never holds a writer's thread and blocked
writes never hold the threads of reads and priority updates. The limiter's
counters and waits show in ``rb.stats()`` (``samples_per_insert``,
``rate_limit_waits``, ``rate_limit_insert_waits``, ...).

Examples:
    >>> import torch
    >>> from rbdata import LazyTensorStorage, ReplayBuffer, SampleToInsertRatio
    >>> from rbdata.service.server.rate_limit import ServiceRateLimiter
    >>> rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
    >>> gate = ServiceRateLimiter(SampleToInsertRatio(1.0, min_size_to_sample=4), 0.05)
    >>> gate.attach(rb)
    >>> gate.run("sample", 4, rb.sample)
    Traceback (most recent call last):
    ...
    rbdata.errors.RateLimitTimeoutError: sample: the buffer's rate limiter ...
    >>> _ = gate.run("extend", None, lambda: rb.extend(torch.arange(4)))
    >>> gate.run("sample", 4, rb.sample).shape
    torch.Size([4])
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from rbdata.errors import RateLimitTimeoutError
from rbdata.loader.rate_limit import SampleToInsertRatio

__all__ = ["INSERT_CALLS", "SAMPLE_CALLS", "ServiceRateLimiter", "check_rate_limit"]

T = TypeVar("T")

#: The owner's calls a rate limiter holds as inserts.
INSERT_CALLS = frozenset({"add", "extend"})
#: The owner's calls a rate limiter holds as samples.
SAMPLE_CALLS = frozenset({"sample", "next", "draw_gather"})


def check_rate_limit(limiter: Any, timeout: Any) -> tuple[SampleToInsertRatio, float | None]:
    """``service_backend_options``' ``rate_limiter`` and ``rate_limiter_timeout``, checked.

    Raises:
        TypeError: for a limiter that is not a SampleToInsertRatio, or a timeout that is
            not a number or None.
        ValueError: for a timeout that is not positive.

    Examples:
        >>> check_rate_limit(SampleToInsertRatio(2.0), 5)
        (SampleToInsertRatio(samples_per_insert=2.0, tolerance=0.1, min_size_to_sample=1), 5.0)
    """
    if not isinstance(limiter, SampleToInsertRatio):
        raise TypeError(
            "service_backend_options['rate_limiter'] must be a SampleToInsertRatio, got "
            f"{type(limiter).__name__}."
        )
    if timeout is None:
        return limiter, None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(
            "service_backend_options['rate_limiter_timeout'] must be a number of seconds or "
            f"None, got {type(timeout).__name__}."
        )
    if not timeout > 0:
        raise ValueError(
            f"service_backend_options['rate_limiter_timeout'] must be > 0 s, got {timeout!r}."
        )
    return limiter, float(timeout)


class ServiceRateLimiter:
    """A :class:`~rbdata.loader.SampleToInsertRatio` held by the owner (module docstring).

    Args:
        limiter: the ratio, tolerance and minimum size to enforce (a copy lives in the actor).
        timeout: the longest wait of one call in seconds (None: no limit).
    """

    def __init__(self, limiter: SampleToInsertRatio, timeout: float | None) -> None:
        self.limiter = limiter
        self.timeout = timeout
        self._buffer: Any = None

    def attach(self, buffer: Any) -> None:
        """Count ``buffer``'s inserts and report the limiter in its ``stats()``."""
        self._buffer = buffer
        self.limiter.attach(buffer)

    def run(self, name: str, size: int | None, call: Callable[[], T]) -> T:
        """Run ``call`` (the owner's call ``name``) once the limiter lets it through.

        Args:
            name: the call (an insert, a sample, or another call, run at once).
            size: a sample's batch size (None: the hosted buffer's).
            call: what to run.

        Raises:
            RateLimitTimeoutError: when the wait outlasts the timeout (nothing was run).
        """
        if name in INSERT_CALLS:
            if not self.limiter.wait_for_learner(self.timeout):
                raise self._timeout(name, "the learners have not sampled enough")
            return call()
        if name not in SAMPLE_CALLS:
            return call()
        limiter = self.limiter
        if not limiter.can_sample():
            start = time.monotonic()
            ok = self._buffer.wait_for_data(limiter.can_sample, self.timeout)
            limiter.record_sample_wait(time.monotonic() - start)
            if not ok:
                raise self._timeout(name, "the collectors have not inserted enough")
        result = call()
        limiter.record_sample((self._buffer.batch_size or 0) if size is None else size)
        return result

    def _timeout(self, name: str, why: str) -> RateLimitTimeoutError:
        limiter = self.limiter
        return RateLimitTimeoutError(
            f"{name}: the buffer's rate limiter ({limiter!r}) held this call for "
            f"{self.timeout} s (rate_limiter_timeout): {limiter.inserted} items inserted, "
            f"{limiter.sampled} sampled; {why}. Check that they run, or raise "
            "service_backend_options['rate_limiter_timeout']."
        )
