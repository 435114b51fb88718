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
  prefetch=2`` vs that step alone (target >= 0.95);
- step about as long as a sample: ``loader prefetch=2`` vs that raw loop
  (target >= 1.3; 2.0 is perfect overlap).

Two more rows show what the DataLoader itself costs, with no rbdata code in
the loop: ``DataLoader over rb.sample()`` (an IterableDataset whose
``__iter__`` yields ``rb.sample()``, as a ReplayBatch so that the default
conversion keeps it whole) vs raw, and ``DataLoader over one batch``
(it yields the same prebuilt batch every time, so nothing is sampled) vs the
step alone: no prefetching loader can beat that second row.

Timing: the loops run in interleaved rounds (every loop once per round,
``STEPS`` steps each, wall clock); a ratio is the median over rounds of the
loop's rate over its reference's rate in the same round, so that a machine
that speeds up or slows down between rounds moves both alike. On a machine
where other processes hold the cores, the prefetch thread has no core to
overlap on and the prefetch ratios drop.

Run it as a script to print the rows; ``bench_loader()`` returns them.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, IterableDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fill, pixel_transitions  # noqa: E402

from rbdata import LazyTensorStorage, ReplayDataset, TensorDictReplayBuffer  # noqa: E402
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
    """``STEPS`` items, each ``make()``: the DataLoader alone, with no rbdata code."""

    def __init__(self, make: Callable[[], object]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[object]:
        for _ in range(STEPS):
            yield self.make()


def _rates(loops: dict[str, Callable[[], None]]) -> dict[str, list[float]]:
    """Steps/s of each loop in every round (rounds interleave the loops)."""
    rates: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(ROUNDS):
        for name, loop in loops.items():
            t0 = time.perf_counter()
            loop()
            rates[name].append(STEPS / (time.perf_counter() - t0))
    return rates


def _ratio(rates: dict[str, list[float]], name: str, reference: str) -> float:
    """Median over rounds of ``name``'s rate over ``reference``'s rate in the same round."""
    return statistics.median(a / b for a, b in zip(rates[name], rates[reference], strict=True))


def _loops(rb: TensorDictReplayBuffer, step: Callable[[object], None]) -> dict[str, Callable]:
    one = as_replay_batch(rb.sample(), {})

    def alone() -> None:
        # The same step, on a batch that costs nothing to get.
        for _ in range(STEPS):
            step(one)

    def raw() -> None:
        # Written as a training loop is: ``batch`` still holds the previous
        # batch while the next one is sampled (as the loader's loop variable does).
        batch = None
        for _ in range(STEPS):
            batch = rb.sample()
            step(batch)
        del batch

    def plain(make: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            for batch in DataLoader(_Yield(make), batch_size=None):
                step(batch)

        return run

    def loader(prefetch: int) -> Callable[[], None]:
        def run() -> None:
            with ReplayDataset(rb, num_batches=STEPS, prefetch=prefetch) as ds:
                for batch in DataLoader(ds, batch_size=None):
                    step(batch)

        return run

    return {
        "alone": alone,
        "raw": raw,
        "dl_sample": plain(lambda: as_replay_batch(rb.sample(), {})),
        "dl_one": plain(lambda: one),
        "p0": loader(0),
        "p2": loader(2),
    }


def _measure(loops: dict[str, Callable], spec: list[tuple[str, str, str | None]]) -> list[Row]:
    """Time the loops that ``spec`` names, in interleaved rounds, and return its rows.

    ``spec`` holds ``(label, loop, reference loop)``; a row whose reference is
    None is a reference itself (ratio 1).
    """
    rates = _rates({name: loops[name] for _, name, _ in spec})
    return [
        (label, statistics.median(rates[name]), 1.0 if ref is None else _ratio(rates, name, ref))
        for label, name, ref in spec
    ]


def bench_loader() -> list[Row]:
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

        base = _loops(rb, _calibrate(1e-3))
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
        )
        for factor in (2, 4):
            step_s = max(1e-3, factor * sample_s)
            setting = f"step = {factor}x sample"
            rows += _measure(
                _loops(rb, _calibrate(step_s)),
                [
                    (f"step alone, {setting} ({step_s * 1e3:.1f} ms)", "alone", None),
                    (f"DataLoader over one batch, {setting} (vs step)", "dl_one", "alone"),
                    (f"loader prefetch=2, {setting} (vs step)", "p2", "alone"),
                ],
            )
        rows += _measure(
            _loops(rb, _calibrate(sample_s)),
            [
                (f"raw, step ~ sample ({sample_s * 1e3:.1f} ms)", "raw", None),
                ("loader prefetch=2, step ~ sample (vs raw)", "p2", "raw"),
            ],
        )
    finally:
        torch.set_num_threads(threads)
    return rows


def main() -> None:
    print(f"{'row':56s} {'steps/s':>9s} {'ratio':>7s}")
    for name, rate, ratio in bench_loader():
        print(f"{name:56s} {rate:9.1f} {ratio:7.2f}")


if __name__ == "__main__":
    main()
