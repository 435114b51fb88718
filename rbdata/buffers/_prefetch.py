"""Batches sampled ahead on one background thread (the buffer's ``prefetch`` argument).

The batches in flight are part of the buffer's state: they were drawn already
(a sampler without replacement has moved past them, the generator has
advanced), so a checkpoint that dropped them would lose those items for the
epoch. :meth:`_BatchPrefetcher.state` settles them and keeps copies;
:meth:`_BatchPrefetcher.restore` hands them out again, first.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import torch
from tensordict import is_tensor_collection
from torch.utils._pytree import tree_map

from rbdata._component.prefetch_state import QUEUE_STATE_VERSION


def _copy_leaf(value: Any) -> Any:
    """A copy of one leaf of a queued batch that shares no memory with it (grad flag kept)."""
    if isinstance(value, torch.Tensor):
        copied = value.detach().clone()
        return copied.requires_grad_() if value.requires_grad else copied
    if is_tensor_collection(value):
        return value.apply(_copy_leaf)
    return copy.deepcopy(value)


def _copy_result(result: Any) -> Any:
    """A copy of a queued ``(batch, info)`` (or None: nothing was sampleable)."""
    return tree_map(_copy_leaf, result, is_leaf=is_tensor_collection)


class _BatchPrefetcher:
    """Keeps ``depth`` batches in flight on one thread, handing them out in order.

    Args:
        depth: how many batches are sampled ahead of the one handed out.
    """

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._executor: ThreadPoolExecutor | None = None
        self._futures: deque[Future[Any]] = deque()
        #: guards the queue; held while waiting for the batches in flight (torchrl's
        #: ``_futures_lock``: a checkpoint holds it until they are settled)
        self.lock = threading.Lock()

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
        with self.lock:
            while len(self._futures) < self.depth + 1:
                self._futures.append(self._executor.submit(sample))
            oldest = self._futures.popleft()
        return oldest.result()

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

    def settle(self) -> None:
        """Wait until every batch in flight is sampled.

        The batches in flight take the buffer's lock: call this without holding it.
        """
        with self.lock:
            wait(tuple(self._futures))

    def state(self) -> dict[str, Any]:
        """The queued batches, settled and copied (call :meth:`settle` first).

        Raises:
            Exception: what sampling a queued batch raised.
        """
        queue = tuple(_copy_result(future.result()) for future in self._futures)
        return {"version": QUEUE_STATE_VERSION, "capacity": self.depth, "queue": queue}

    def restore(self, queue: Iterable[Any]) -> None:
        """Forget the queue, then queue copies of ``queue``'s results, handed out first."""
        self.drain()
        for result in queue:
            future: Future[Any] = Future()
            future.set_result(_copy_result(result))
            self._futures.append(future)

    def __getstate__(self) -> dict[str, Any]:
        self.settle()
        return {"depth": self.depth, "queue": [future.result() for future in self._futures]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _BatchPrefetcher.__init__(self, state["depth"])
        self.restore(state.get("queue", ()))
