"""Training-loop throughput through ReplayDataset, beside a raw ``rb.sample()`` loop.

Every loop runs a training step of fixed cost (a float32 matmul on one
thread) per batch of 256 pixel transitions (2x uint8[4, 84, 84]), in three
settings of the step's cost. Rows, in steps/s, each with its ratio to the
row it must be compared with:

- step ~1 ms: ``step alone`` (the step on one prebuilt batch), ``raw``
  (``rb.sample()`` + the step in a Python loop), ``loader prefetch=0``
  through ``DataLoader(ReplayDataset(rb), batch_size=None)`` vs raw (target
  >= 0.95), ``loader prefetch=2`` vs raw;
- step longer than a sample (twice, then four times the measured sampling
  cost, at least 1 ms), so that sampling can hide behind it: ``loader
  prefetch=2`` vs that step alone (target >= 0.95), the ``plain-torch
  prefetch limit`` (:class:`PrefetchLimit`, below) vs that step alone, and
  ``loader prefetch=2 vs plain-torch prefetch limit`` (target >= 0.95);
- step about as long as a sample: ``loader prefetch=2`` vs that raw loop
  (target >= 1.3; 2.0 is perfect overlap).

Two more rows show what the DataLoader itself costs, with no rbdata code in
the loop: ``DataLoader over rb.sample()`` (an IterableDataset whose
``__iter__`` yields ``rb.sample()``, as a ReplayBatch so that the default
conversion keeps it whole) vs raw, and ``DataLoader over one batch``
(it yields the same prebuilt batch every time, so nothing is sampled) vs the
step alone: no prefetching loader can beat that second row.

The prefetch limit is the minimal overlapped loader in plain torch, served
through the same ``DataLoader(..., batch_size=None)``: one thread draws
``randint`` indices and ``index_select``s every leaf of the buffer's own
storage tensors into a ring of preallocated outputs, handed over through a
bounded ``queue.Queue`` (2 batches sampled ahead, as ``prefetch=2``). Its batches have the
keys, shapes and dtypes of rbdata's (``index`` included) and are
:class:`~rbdata.loader.ReplayBatch` es, the TensorDict type that torch's
default conversion keeps whole, so the DataLoader costs the same on both sides.

Timing: the loops run in interleaved rounds (every loop once per round,
``STEPS`` steps each, wall clock); a ratio is the median over rounds of the
loop's rate over its reference's rate in the same round, so that a machine
that speeds up or slows down between rounds moves both alike. On a machine
where other processes hold the cores, the prefetch thread has no core to
overlap on and the prefetch ratios drop.

Run it as a script to print the rows (``--rounds`` and ``--steps`` shorten a
run); ``bench_loader()`` returns them.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, IterableDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fill, pixel_transitions  # noqa: E402

from rbdata import LazyTensorStorage, ReplayDataset, TensorDictReplayBuffer  # noqa: E402
from rbdata.loader import ReplayBatch  # noqa: E402
from rbdata.loader._batch import as_replay_batch  # noqa: E402

CAPACITY = 4096
BATCH = 256
STEPS = 60
ROUNDS = 9

Row = tuple[str, float, float]


def _make_step(size: int) -> Callable[[object], None]:
    weight = torch.randn(size, size)
    x = torch.randn(size, size)

    def step(batch: object) -> None:
        y = x @ weight
        if batch is not None:
            y[0, 0] += batch["next", "reward"][0, 0]

    return step


def _step_cost(step: Callable[[object], None]) -> float:
    for _ in range(5):
        step(None)
    t0 = time.perf_counter()
    for _ in range(50):
        step(None)
    return (time.perf_counter() - t0) / 50


def _calibrate(target_s: float) -> Callable[[object], None]:
    """A step whose matmul costs about ``target_s`` seconds on one thread."""
    size = 128
    while True:
        cost = _step_cost(_make_step(size))
        if cost >= target_s or size >= 2048:
            break
        size = int(size * min(1.5, max(1.05, (target_s / cost) ** (1 / 3))))
    return _make_step(size)


class _Yield(IterableDataset):
    """``steps`` items, each ``make()``: the DataLoader alone, with no rbdata code."""

    def __init__(self, make: Callable[[], object], steps: int) -> None:
        self.make = make
        self.steps = steps

    def __iter__(self) -> Iterator[object]:
        for _ in range(self.steps):
            yield self.make()


class PrefetchLimit(IterableDataset):
    """The minimal overlapped loader in plain torch: a thread, a ring of outputs, a queue.

    Each pass starts one thread that, for each of ``num_batches`` batches,
    draws ``torch.randint`` indices into the next ring slot and
    ``index_select``s every leaf of ``storage`` (the very tensors the buffer
    gathers from) into that slot's preallocated outputs, then puts the slot on
    a ``queue.Queue`` bounded at ``ahead - 1``: with the slot the thread holds
    (being written, or waiting for room), exactly ``ahead`` batches are
    sampled ahead of the consumer, as with ``ReplayDataset(prefetch=ahead)``.
    The ring holds the queue's bound + 2 slots (the one being written, those
    queued, the one the consumer steps on), so a slot is written again only
    after the consumer has taken it and the one after it. A slot is a
    :class:`~rbdata.loader.ReplayBatch` built once, with the leaves and
    ``index`` of rbdata's batches.

    Args:
        storage: a filled rbdata tensor storage (``leaf_keys`` / ``get_leaf``).
        batch_size: items per batch.
        num_batches: batches per pass.
        ahead: batches sampled ahead of the consumer (>= 2: a queue bound of 0
            would mean no bound).
    """

    def __init__(self, storage: LazyTensorStorage, batch_size: int, num_batches: int, ahead: int):
        if ahead < 2:
            raise ValueError(f"ahead must be >= 2, got {ahead}")
        self.sources = {key: storage.get_leaf(key) for key in storage.leaf_keys()}
        self.size = len(storage)
        self.num_batches = num_batches
        self.bound = ahead - 1
        self.ring = [self._slot(batch_size) for _ in range(self.bound + 2)]

    def _slot(
        self, batch_size: int
    ) -> tuple[torch.Tensor, dict[object, torch.Tensor], ReplayBatch]:
        outs = {
            key: torch.empty(batch_size, *src.shape[1:], dtype=src.dtype)
            for key, src in self.sources.items()
        }
        index = torch.empty(batch_size, dtype=torch.int64)
        batch = ReplayBatch(batch_size=[batch_size])
        for key, out in [*outs.items(), ("index", index)]:
            batch.set(key, out)
        return index, outs, batch

    def __iter__(self) -> Iterator[ReplayBatch]:
        ready: queue.Queue[ReplayBatch] = queue.Queue(self.bound)
        stop = threading.Event()
        thread = threading.Thread(
            target=self._produce, args=(ready, stop, torch.get_num_threads()), daemon=True
        )
        thread.start()
        try:
            for _ in range(self.num_batches):
                yield ready.get()
        finally:
            stop.set()
            thread.join()

    def _produce(
        self, ready: queue.Queue[ReplayBatch], stop: threading.Event, threads: int
    ) -> None:
        torch.set_num_threads(threads)  # per thread: use the consumer's count, as rbdata does
        for i in range(self.num_batches):
            index, outs, batch = self.ring[i % len(self.ring)]
            torch.randint(self.size, index.shape, out=index)
            for key, source in self.sources.items():
                torch.index_select(source, 0, index, out=outs[key])
            while True:  # a consumer that stops early sets ``stop``: leave then
                if stop.is_set():
                    return
                try:
                    ready.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    pass


def _rates(loops: dict[str, Callable[[], None]], rounds: int, steps: int) -> dict[str, list[float]]:
    """Steps/s of each loop in every round (rounds interleave the loops)."""
    rates: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, loop in loops.items():
            t0 = time.perf_counter()
            loop()
            rates[name].append(steps / (time.perf_counter() - t0))
    return rates


def _ratio(rates: dict[str, list[float]], name: str, reference: str) -> float:
    """Median over rounds of ``name``'s rate over ``reference``'s rate in the same round."""
    return statistics.median(a / b for a, b in zip(rates[name], rates[reference], strict=True))


def _loops(
    rb: TensorDictReplayBuffer, step: Callable[[object], None], steps: int
) -> dict[str, Callable]:
    # A copy: a sampled batch kept alive would hold one of the buffer's recycled
    # gather outputs for good and leave the loaders fewer to reuse.
    one = as_replay_batch(rb.sample().clone())
    limit_ds = PrefetchLimit(rb.storage, rb.batch_size, steps, ahead=2)

    def alone() -> None:
        # The same step, on a batch that costs nothing to get.
        for _ in range(steps):
            step(one)

    def raw() -> None:
        # Written as a training loop is: ``batch`` still holds the previous
        # batch while the next one is sampled (as the loader's loop variable does).
        batch = None
        for _ in range(steps):
            batch = rb.sample()
            step(batch)
        del batch

    def served(dataset: IterableDataset) -> None:
        for batch in DataLoader(dataset, batch_size=None):
            step(batch)

    def loader(prefetch: int) -> Callable[[], None]:
        def run() -> None:
            with ReplayDataset(rb, num_batches=steps, prefetch=prefetch) as ds:
                served(ds)

        return run

    return {
        "alone": alone,
        "raw": raw,
        "dl_sample": lambda: served(_Yield(lambda: as_replay_batch(rb.sample()), steps)),
        "dl_one": lambda: served(_Yield(lambda: one, steps)),
        "limit": lambda: served(limit_ds),
        "p0": loader(0),
        "p2": loader(2),
    }


def _measure(
    loops: dict[str, Callable],
    spec: list[tuple[str, str, str | None]],
    rounds: int,
    steps: int,
) -> list[Row]:
    """Time the loops that ``spec`` names, in interleaved rounds, and return its rows.

    ``spec`` holds ``(label, loop, reference loop)``; a row whose reference is
    None is a reference itself (ratio 1).
    """
    rates = _rates({name: loops[name] for _, name, _ in spec}, rounds, steps)
    return [
        (label, statistics.median(rates[name]), 1.0 if ref is None else _ratio(rates, name, ref))
        for label, name, ref in spec
    ]


def bench_loader(rounds: int = ROUNDS, steps: int = STEPS) -> list[Row]:
    """Return rows ``(name, steps_per_s, ratio_vs_reference_row)`` (see the module doc)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(CAPACITY), batch_size=BATCH)
        fill(rb, CAPACITY, pixel_transitions, chunk=1024)
        for _ in range(5):
            rb.sample()
        t0 = time.perf_counter()
        for _ in range(30):
            rb.sample()
        sample_s = (time.perf_counter() - t0) / 30

        base = _loops(rb, _calibrate(1e-3), steps)
        base["raw"]()  # warm up
        rows = _measure(
            base,
            [
                ("step alone (~1 ms)", "alone", None),
                ("raw: rb.sample() + step", "raw", "alone"),
                ("DataLoader over rb.sample() (vs raw)", "dl_sample", "raw"),
                ("loader prefetch=0 (vs raw)", "p0", "raw"),
                ("loader prefetch=2 (vs raw)", "p2", "raw"),
            ],
            rounds,
            steps,
        )
        for factor in (2, 4):
            step_s = max(1e-3, factor * sample_s)
            setting = f"step = {factor}x sample"
            rows += _measure(
                _loops(rb, _calibrate(step_s), steps),
                [
                    (f"step alone, {setting} ({step_s * 1e3:.1f} ms)", "alone", None),
                    (f"DataLoader over one batch, {setting} (vs step)", "dl_one", "alone"),
                    (f"plain-torch prefetch limit, {setting} (vs step)", "limit", "alone"),
                    (f"loader prefetch=2, {setting} (vs step)", "p2", "alone"),
                    (f"loader prefetch=2 vs plain-torch prefetch limit, {setting}", "p2", "limit"),
                ],
                rounds,
                steps,
            )
        rows += _measure(
            _loops(rb, _calibrate(sample_s), steps),
            [
                (f"raw, step ~ sample ({sample_s * 1e3:.1f} ms)", "raw", None),
                ("loader prefetch=2, step ~ sample (vs raw)", "p2", "raw"),
            ],
            rounds,
            steps,
        )
    finally:
        torch.set_num_threads(threads)
    return rows


def main(argv: list[str] | None = None) -> list[Row]:
    """Print the rows and return them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=STEPS, help="steps per loop and round")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error(f"--rounds and --steps must be >= 1, got {args.rounds} and {args.steps}")
    rows = bench_loader(args.rounds, args.steps)
    print(f"{'row':64s} {'steps/s':>9s} {'ratio':>7s}")
    for name, rate, ratio in rows:
        print(f"{name:64s} {rate:9.1f} {ratio:7.2f}")
    return rows


if __name__ == "__main__":
    main()
