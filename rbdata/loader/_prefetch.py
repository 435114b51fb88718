"""The prefetch thread: keeps exactly ``depth`` batches sampled ahead of the consumer.

Why not ``torchdata.nodes.Prefetcher``: its worker notices a stop request only
between items and after polling a semaphore every 100 ms, so closing it costs
up to 0.1 s (a loop broken early, 200 times, would take 20 s); it cannot
interrupt a source that is waiting for a collector; and its resume replays
the source from a snapshot, re-sampling batches (counting their consumption
twice). This thread wakes at once on close, waits on conditions (never
polls), and shares the dataset's pending-batch bookkeeping so that a
checkpoint records what was sampled but not handed out. Pinning uses torch's
own ``pin_memory`` on this thread.
"""

from __future__ import annotations

import threading

import torch

from rbdata.loader._pass import _PassEngine


class _PrefetchThread:
    """Runs the engine's producer on a daemon thread, ``depth`` records ahead.

    The thread samples while fewer than ``depth`` records are pending (sampled
    and not handed out), gathers each one (copy, pin, device copy), and
    sleeps on the engine's condition otherwise. Errors are stored on the
    engine and re-raised by the consumer.

    Args:
        engine: the dataset's pass engine.
        depth: how many batches to keep sampled ahead (>= 1).
    """

    def __init__(self, engine: _PassEngine, depth: int) -> None:
        self._engine = engine
        self._depth = depth
        self._stop = threading.Event()
        # torch's intra-op thread count is per thread (OpenMP): a new thread would
        # start with every core and contend with the training step; use the caller's.
        self._num_threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._run, name="rbdata-prefetch", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the thread is running."""
        return self._thread.is_alive()

    def _run(self) -> None:
        engine, stop = self._engine, self._stop
        torch.set_num_threads(self._num_threads)
        try:
            while not stop.is_set():
                with engine.lock:
                    record = engine.next_ungathered()
                    while (
                        record is None
                        and not stop.is_set()
                        and (engine.producer_done or len(engine.pending) >= self._depth)
                    ):
                        engine.wait()
                        record = engine.next_ungathered()
                if stop.is_set():
                    return
                if record is None:
                    record = engine.produce(stop)
                    if record is None:
                        continue
                engine.gather(record, ahead=True)
        except BaseException as err:  # re-raised on the consumer's thread
            with engine.cond:
                engine.error = err
                engine.producer_done = True
                engine.cond.notify_all()

    def close(self) -> None:
        """Stop the thread and wait for it (it finishes the gather it may be inside)."""
        self._stop.set()
        self._engine.wake_waiters()
        if self._thread is not threading.current_thread():
            self._thread.join()
