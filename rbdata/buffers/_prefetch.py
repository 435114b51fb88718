"""Batches sampled ahead on one background thread (the buffer's ``prefetch`` argument)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch


class _BatchPrefetcher:
    """Keeps ``depth`` batches in flight on one thread, handing them out in order.

    Args:
        depth: how many batches are sampled ahead of the one handed out.
    """

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._executor: ThreadPoolExecutor | None = None
        self._futures: deque[Future[Any]] = deque()

    def __len__(self) -> int:
        return len(self._futures)

    @property
    def pending(self) -> deque[Future[Any]]:
        """The batches in flight, oldest first."""
        return self._futures

    def next(self, sample: Callable[[], Any]) -> Any:
        """Top the queue up with calls of ``sample`` and return the oldest result."""
        if self._executor is None:
            threads = torch.get_num_threads()
            self._executor = ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix="rbdata-prefetch",
                initializer=torch.set_num_threads,  # torch's thread count is per thread
                initargs=(threads,),
            )
        while len(self._futures) < self.depth + 1:
            self._futures.append(self._executor.submit(sample))
        return self._futures.popleft().result()

    def pop(self) -> Any:
        """The oldest result, without sampling more (the queue only shrinks)."""
        return self._futures.popleft().result()

    def drain(self) -> None:
        """Cancel the batches not started yet and forget the queue."""
        for future in self._futures:
            future.cancel()
        self._futures.clear()

    def shutdown(self) -> None:
        """Drain and stop the thread."""
        self.drain()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __getstate__(self) -> dict[str, Any]:
        return {"depth": self.depth}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _BatchPrefetcher.__init__(self, state["depth"])
