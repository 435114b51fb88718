"""Timing helpers and data builders shared by the benchmarks (library-agnostic)."""

from __future__ import annotations

import math
import mmap
import os
import statistics
import time
from collections.abc import Callable

import torch
from tensordict import TensorDict

OBS = 64


def timeit(
    fn: Callable[[], object],
    *,
    min_time: float = 0.6,
    repeats: int = 5,
    clock: Callable[[], float] = time.thread_time,
) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` rounds of at least ``min_time`` / repeats.

    The default clock is this thread's CPU time, so other processes on a shared
    machine do not inflate single-threaded timings; pass ``time.perf_counter``
    for work that spans threads.
    """
    warm_until = time.perf_counter() + min_time / 3  # steady state: caches, allocator
    while time.perf_counter() < warm_until:
        fn()
    t0 = clock()
    fn()
    once = max(clock() - t0, 1e-6)
    per_round = max(1, int(min_time / repeats / once))
    rounds = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(per_round):
            fn()
        rounds.append((clock() - t0) / per_round)
    return statistics.median(rounds)


def timeit_pair(
    a: Callable[[], object], b: Callable[[], object], *, min_time: float = 1.2, repeats: int = 7
) -> tuple[float, float]:
    """Median seconds per call of ``a`` and ``b``, measured in alternating rounds."""
    t_a, t_b = timeit_rounds(a, b, min_time=min_time, repeats=repeats)
    return t_a, t_b


def timeit_rounds(
    *fns: Callable[[], object], min_time: float = 1.2, repeats: int = 7
) -> list[float]:
    """Median seconds per call of each of ``fns``, measured in interleaved rounds.

    Every round runs each function once in turn, so that a shared machine's
    load swings move all of them alike instead of favouring one.
    """
    per_round = []
    for fn in fns:
        warm_until = time.perf_counter() + min_time / 6
        while time.perf_counter() < warm_until:
            fn()
        t0 = time.thread_time()
        fn()
        once = max(time.thread_time() - t0, 1e-6)
        per_round.append(max(1, int(min_time / len(fns) / repeats / once)))
    rounds: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for side, fn in enumerate(fns):
            t0 = time.thread_time()
            for _ in range(per_round[side]):
                fn()
            rounds[side].append((time.thread_time() - t0) / per_round[side])
    return [statistics.median(r) for r in rounds]


def transitions(n: int, obs: int = OBS) -> TensorDict:
    """``n`` flat transitions: obs float32[obs], action, reward, done, and the same under next."""
    return TensorDict(
        {
            "observation": torch.randn(n, obs),
            "action": torch.randn(n, 4),
            "reward": torch.randn(n, 1),
            "done": torch.zeros(n, 1, dtype=torch.bool),
            "next": {
                "observation": torch.randn(n, obs),
                "reward": torch.randn(n, 1),
                "done": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        [n],
    )


def pixel_transitions(n: int) -> TensorDict:
    """``n`` pixel transitions: uint8[4, 84, 84] observation and next observation."""
    return TensorDict(
        {
            "observation": torch.randint(0, 255, (n, 4, 84, 84), dtype=torch.uint8),
            "action": torch.zeros(n, 1, dtype=torch.long),
            "next": {
                "observation": torch.randint(0, 255, (n, 4, 84, 84), dtype=torch.uint8),
                "reward": torch.zeros(n, 1),
                "done": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        [n],
    )


def fill(rb: object, capacity: int, make: Callable[[int], TensorDict], chunk: int = 50_000) -> None:
    """Fill ``rb`` with ``capacity`` items in chunks (same chunk of data reused)."""
    data = make(min(chunk, capacity))
    written = 0
    while written < capacity:
        n = min(chunk, capacity - written)
        rb.extend(data[:n])
        written += n


Alloc = Callable[[tuple[int, ...], torch.dtype], torch.Tensor]


def _zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


def huge_page_alloc(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Zeros in anonymous memory advised for transparent huge pages (``MADV_HUGEPAGE``).

    What rbdata's large private rows ask for; written whole here, so every
    page is committed before the clock starts, as ``torch.zeros``'s are.
    """
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        region.madvise(mmap.MADV_HUGEPAGE)
    tensor = torch.frombuffer(region, dtype=dtype).view(shape)
    tensor.zero_()
    return tensor


def file_alloc(directory: str) -> Alloc:
    """An allocator of tensors memory-mapped from new files in ``directory`` (``from_file``)."""
    count = [0]

    def alloc(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        count[0] += 1
        path = os.path.join(directory, f"limit-{count[0]}.bin")
        numel = math.prod(shape)
        return torch.from_file(path, shared=True, size=numel, dtype=dtype).view(shape)

    return alloc


def _ring_copy(dst: torch.Tensor, start: int, src: torch.Tensor) -> None:
    """Copy ``src`` into the rows of ``dst`` from ``start``, wrapping at ``len(dst)``."""
    stop, capacity = start + src.shape[0], dst.shape[0]
    if stop <= capacity:
        dst[start:stop].copy_(src)
    else:
        cut = capacity - start
        dst[start:].copy_(src[:cut])
        dst[: stop - capacity].copy_(src[cut:])


class Limit:
    """The irreducible work in plain torch: preallocated per-key tensors.

    Args:
        capacity: rows per key.
        example: a batch whose keys, shapes and dtypes the rows take.
        batch: rows per sampled batch (the preallocated outputs).
        alloc: makes the per-key row blocks (default: ``torch.zeros`` in memory).
    """

    def __init__(
        self, capacity: int, example: TensorDict, batch: int, alloc: Alloc = _zeros
    ) -> None:
        self.capacity = capacity
        self.keys = list(example.keys(True, True))
        self.bufs = {
            k: alloc((capacity, *example.get(k).shape[1:]), example.get(k).dtype) for k in self.keys
        }
        self.outs = {
            k: torch.empty(batch, *example.get(k).shape[1:], dtype=example.get(k).dtype)
            for k in self.keys
        }
        self.batch = batch
        self.cursor = 0

    def extend(self, data: TensorDict) -> None:
        n = data.shape[0]
        s = self.cursor
        e = s + n
        for k in self.keys:
            _ring_copy(self.bufs[k], s, data.get(k))
        self.cursor = e % self.capacity

    def sample(self, size: int | None = None) -> None:
        idx = torch.randint(size or self.capacity, (self.batch,))
        for k in self.keys:
            torch.index_select(self.bufs[k], 0, idx, out=self.outs[k])

    def gather(self, idx: torch.Tensor) -> None:
        for k in self.keys:
            torch.index_select(self.bufs[k], 0, idx, out=self.outs[k][: idx.numel()])


class PackedLimit:
    """The irreducible work for packed rows: one byte row per item, one gather per batch.

    Every leaf of an item is laid side by side in one byte row (rounded up to
    8 bytes), as rbdata's tensor storages do; ``sample`` is ``randint`` plus one
    ``index_select`` of the rows viewed as 8-byte words (the fastest gather of
    such rows) into a preallocated block, with no per-leaf views and no
    TensorDict. ``extend`` copies each leaf into its columns.

    Args:
        capacity: rows.
        example: a batch whose leaves make up a row.
        batch: rows per sampled batch.
        alloc: makes the row block (default: ``torch.zeros`` in memory).
    """

    def __init__(
        self, capacity: int, example: TensorDict, batch: int, alloc: Alloc = _zeros
    ) -> None:
        self.capacity = capacity
        self.keys = list(example.keys(True, True))
        widths = [example.get(k)[0].numel() * example.get(k).element_size() for k in self.keys]
        self.offsets = [sum(widths[:i]) for i in range(len(widths))]
        self.widths = widths
        row_bytes = -(-sum(widths) // 8) * 8
        self.rows = alloc((capacity, row_bytes), torch.uint8)
        self.words = self.rows.view(torch.int64)
        self.out = torch.empty(batch, row_bytes // 8, dtype=torch.int64)
        self.batch = batch
        self.cursor = 0

    def extend(self, data: TensorDict) -> None:
        n = data.shape[0]
        s = self.cursor
        e = s + n
        for k, off, w in zip(self.keys, self.offsets, self.widths, strict=True):
            src = data.get(k).reshape(n, -1).contiguous().view(torch.uint8)
            _ring_copy(self.rows[:, off : off + w], s, src)
        self.cursor = e % self.capacity

    def sample(self, size: int | None = None) -> None:
        idx = torch.randint(size or self.capacity, (self.batch,))
        torch.index_select(self.words, 0, idx, out=self.out)

    def gather(self, idx: torch.Tensor) -> None:
        torch.index_select(self.words, 0, idx, out=self.out[: idx.numel()])


class ConsumeLimit:
    """Consume-once in plain torch: per-key tensors, free slots reused in ring order.

    Every slot starts consumed (free). :meth:`cycle` writes a batch into the
    free slots in ring order from a reuse position (the slot after the last
    free slot written; ``nonzero`` of a free mask, rotated), as a round-robin
    writer that skips live slots: one slice copy per key when the slots are a
    run (two at the wrap point), as after a full drain, else one
    ``index_copy_`` per key. It then draws every live slot once, ``batch`` at
    a time, in ``randperm`` order, freeing each: what a buffer with
    ``consume_after_n_samples=1`` does for ``extend`` followed by ``sample``
    until it is empty.

    Args:
        capacity: rows per key.
        example: a batch whose keys, shapes and dtypes the rows take.
        batch: rows per drawn batch.
    """

    def __init__(self, capacity: int, example: TensorDict, batch: int) -> None:
        self.store = Limit(capacity, example, batch)
        self.free = torch.ones(capacity, dtype=torch.bool)
        self.reuse_at = 0

    def _take(self, n: int) -> torch.Tensor:
        """The next ``n`` free slots in ring order from the reuse position, taken."""
        free = self.free.nonzero().squeeze(1)
        cut = int(torch.searchsorted(free, self.reuse_at))
        slots = torch.cat([free[cut:], free[:cut]])[:n] if cut else free[:n]
        self.free[slots] = False
        self.reuse_at = int(slots[-1]) + 1
        return slots

    def _write(self, slots: torch.Tensor, data: TensorDict) -> None:
        store, n, first = self.store, slots.numel(), int(slots[0])
        run = (torch.arange(first, first + n) % store.capacity).equal(slots)
        for k in store.keys:
            if run:  # consecutive modulo the capacity: one or two slices
                _ring_copy(store.bufs[k], first, data.get(k))
            else:
                store.bufs[k].index_copy_(0, slots, data.get(k))

    def _drain(self) -> None:
        store = self.store
        live = (~self.free).nonzero().squeeze(1)
        order = live[torch.randperm(live.numel())]
        for s in range(0, order.numel(), store.batch):
            drawn = order[s : s + store.batch]
            store.gather(drawn)
            self._freed(drawn)

    def _freed(self, drawn: torch.Tensor) -> None:
        self.free[drawn] = True

    def cycle(self, data: TensorDict) -> None:
        """Write ``data`` into free slots, then draw every live slot once."""
        self._write(self._take(data.shape[0]), data)
        self._drain()


class FreeListConsumeLimit(ConsumeLimit):
    """:class:`ConsumeLimit` reusing free slots in the order they were freed (a FIFO list).

    torchrl's order: the slots a batch reuses are scattered, so every write is
    one ``index_copy_`` per key.
    """

    def __init__(self, capacity: int, example: TensorDict, batch: int) -> None:
        super().__init__(capacity, example, batch)
        self.queue = [torch.arange(capacity)]  # chunks, in the order they were freed

    def _take(self, n: int) -> torch.Tensor:
        queue = torch.cat(self.queue) if len(self.queue) > 1 else self.queue[0]
        slots = queue[:n]
        self.queue = [queue[n:]]
        self.free[slots] = False
        return slots

    def _freed(self, drawn: torch.Tensor) -> None:
        super()._freed(drawn)
        self.queue.append(drawn)
