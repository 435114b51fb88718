"""Timing helpers and data builders shared by the benchmarks (library-agnostic)."""

from __future__ import annotations

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
    """Median seconds per call of ``a`` and ``b``, measured in alternating rounds.

    Alternating the two keeps a shared machine's load swings from favouring one side.
    """
    per_round = []
    for fn in (a, b):
        warm_until = time.perf_counter() + min_time / 6
        while time.perf_counter() < warm_until:
            fn()
        t0 = time.thread_time()
        fn()
        per_round.append(max(1, int(min_time / 2 / repeats / max(time.thread_time() - t0, 1e-6))))
    rounds: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for side, fn in enumerate((a, b)):
            t0 = time.thread_time()
            for _ in range(per_round[side]):
                fn()
            rounds[side].append((time.thread_time() - t0) / per_round[side])
    return statistics.median(rounds[0]), statistics.median(rounds[1])


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


class Limit:
    """The irreducible work in plain torch: preallocated per-key tensors."""

    def __init__(self, capacity: int, example: TensorDict, batch: int) -> None:
        self.capacity = capacity
        self.keys = list(example.keys(True, True))
        self.bufs = {
            k: torch.zeros(capacity, *example.get(k).shape[1:], dtype=example.get(k).dtype)
            for k in self.keys
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
            src = data.get(k)
            if e <= self.capacity:
                self.bufs[k][s:e].copy_(src)
            else:
                cut = self.capacity - s
                self.bufs[k][s:].copy_(src[:cut])
                self.bufs[k][: e - self.capacity].copy_(src[cut:])
        self.cursor = e % self.capacity

    def sample(self, size: int | None = None) -> None:
        idx = torch.randint(size or self.capacity, (self.batch,))
        for k in self.keys:
            torch.index_select(self.bufs[k], 0, idx, out=self.outs[k])

    def gather(self, idx: torch.Tensor) -> None:
        for k in self.keys:
            torch.index_select(self.bufs[k], 0, idx, out=self.outs[k][: idx.numel()])
