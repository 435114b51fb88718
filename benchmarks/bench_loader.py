"""Training-loop throughput through ReplayDataset, beside a raw ``rb.sample()`` loop.

Every loop runs a training step of fixed cost (a float32 matmul on one
thread) per batch of 256 pixel transitions (2x uint8[4, 84, 84]), in three
settings of the step's cost. Rows, in steps/s, each with its ratio to the
row it must be compared with:

- step ~1 ms: ``step alone``, ``raw`` (``rb.sample()`` + the step in a Python
  loop), ``loader prefetch=0`` through ``DataLoader(ReplayDataset(rb),
  batch_size=None)`` vs raw (target >= 0.95), ``loader prefetch=2`` vs raw;
- step longer than a sample (twice the measured sampling cost, at least
  1 ms), so that sampling can hide behind it: ``loader prefetch=2`` vs that
  step alone (target >= 0.95);
- step about as long as a sample: ``loader prefetch=2`` vs that raw loop
  (target >= 1.3; 2.0 is perfect overlap).

On a machine where other processes hold the cores, the prefetch thread has no
core to overlap on and the prefetch ratios drop.

Run it as a script to print the rows; ``bench_loader()`` returns them.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fill, pixel_transitions  # noqa: E402

from rbdata import LazyTensorStorage, ReplayDataset, TensorDictReplayBuffer  # noqa: E402

CAPACITY = 4096
BATCH = 256
STEPS = 150
REPEATS = 3

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


def _rates(loops: dict[str, Callable[[], None]]) -> dict[str, float]:
    """Median steps/s of each loop (each runs STEPS steps), rounds interleaved, wall clock."""
    runs: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(REPEATS):
        for name, loop in loops.items():
            t0 = time.perf_counter()
            loop()
            runs[name].append(STEPS / (time.perf_counter() - t0))
    return {name: statistics.median(rates) for name, rates in runs.items()}


def _loops(rb: TensorDictReplayBuffer, step: Callable[[object], None]) -> dict[str, Callable]:
    def alone() -> None:
        for _ in range(STEPS):
            step(None)

    def raw() -> None:
        # Written as a training loop is: ``batch`` still holds the previous
        # batch while the next one is sampled (as the loader's loop variable does).
        batch = None
        for _ in range(STEPS):
            batch = rb.sample()
            step(batch)
        del batch

    def loader(prefetch: int) -> Callable[[], None]:
        def run() -> None:
            with ReplayDataset(rb, num_batches=STEPS, prefetch=prefetch) as ds:
                for batch in DataLoader(ds, batch_size=None):
                    step(batch)

        return run

    return {"alone": alone, "raw": raw, "p0": loader(0), "p2": loader(2)}


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
        rates = _rates(base)
        heavy = _loops(rb, _calibrate(max(1e-3, 2 * sample_s)))
        heavy_rates = _rates({"alone": heavy["alone"], "p2": heavy["p2"]})
        heavy_alone, heavy_p2 = heavy_rates["alone"], heavy_rates["p2"]
        same = _loops(rb, _calibrate(sample_s))
        same_rates = _rates({"raw": same["raw"], "p2": same["p2"]})
        raw_same, p2_same = same_rates["raw"], same_rates["p2"]
    finally:
        torch.set_num_threads(threads)
    return [
        ("step alone (~1 ms)", rates["alone"], 1.0),
        ("raw: rb.sample() + step", rates["raw"], rates["raw"] / rates["alone"]),
        ("loader prefetch=0 (vs raw)", rates["p0"], rates["p0"] / rates["raw"]),
        ("loader prefetch=2 (vs raw)", rates["p2"], rates["p2"] / rates["raw"]),
        (f"step alone, step = 2x sample ({2e3 * sample_s:.1f} ms)", heavy_alone, 1.0),
        ("loader prefetch=2, step = 2x sample (vs step)", heavy_p2, heavy_p2 / heavy_alone),
        (f"raw, step ~ sample ({sample_s * 1e3:.1f} ms)", raw_same, 1.0),
        ("loader prefetch=2, step ~ sample (vs raw)", p2_same, p2_same / raw_same),
    ]


def main() -> None:
    print(f"{'row':52s} {'steps/s':>9s} {'ratio':>7s}")
    for name, rate, ratio in bench_loader():
        print(f"{name:52s} {rate:9.1f} {ratio:7.2f}")


if __name__ == "__main__":
    main()
