"""Where ``sample(256)`` from a 1M LazyTensorStorage spends its time, stage by stage.

Four loops, each one stage longer than the one before, run in interleaved
rounds (``timeit_rounds``); the cost of a stage is the difference between a
loop and the previous one, in microseconds per batch:

1. ``packed gather (limit)``: ``randint`` + one ``index_select`` of packed rows
   into a preallocated block (``PackedLimit.sample``): the irreducible work.
2. ``draw (sampler)``: the same gather, with the indices drawn by
   ``rb.sampler.sample(rb.storage, 256)`` instead of ``randint``.
3. ``gather, views, TensorDict``: ``rb.storage.get(index)`` instead of the
   bare gather: the storage's copy, the per-leaf views of the copied rows, and
   the TensorDict the user receives.
4. ``buffer (locks, info, transforms)``: the whole ``rb.sample(256)``.

Run it as a script, or through ``python benchmarks/run.py --rows stages``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import PackedLimit, fill, timeit_rounds, transitions  # noqa: E402

Stage = tuple[str, float, float]  # name, cost of the stage (us), cumulative cost (us)


def sample_stages(lib: ModuleType, capacity: int = 1_000_000, batch: int = 256) -> list[Stage]:
    """Per-batch cost of each stage of ``rb.sample(batch)`` (see the module docstring)."""
    torch.set_num_threads(1)
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(capacity))
    fill(rb, capacity, transitions)
    packed = PackedLimit(capacity, transitions(1), batch)
    fill(packed, capacity, transitions)
    sampler, storage = rb.sampler, rb.storage

    def drawn_gather() -> None:
        index, _ = sampler.sample(storage, batch)
        packed.gather(index)

    def storage_get() -> None:
        index, _ = sampler.sample(storage, batch)
        storage.get(index)

    names = ["packed gather (limit)", "draw (sampler)", "gather, views, TensorDict"]
    names.append("buffer (locks, info, transforms)")
    times = timeit_rounds(packed.sample, drawn_gather, storage_get, lambda: rb.sample(batch))
    stages, before = [], 0.0
    for name, seconds in zip(names, times, strict=True):
        stages.append((name, (seconds - before) * 1e6, seconds * 1e6))
        before = seconds
    return stages


def main() -> None:
    """Print the stages of rbdata's ``sample(256)``."""
    import rbdata

    print(f"{'stage':<36}{'us/batch':>10}{'cumulative':>12}")
    for name, cost, total in sample_stages(rbdata):
        print(f"{name:<36}{cost:>10.1f}{total:>12.1f}")


if __name__ == "__main__":
    main()
