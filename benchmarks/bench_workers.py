"""DataLoader workers when the per-batch transform dominates (issue 34, item 4).

A DrQ-style random shift (pad 4, random 84x84 crop per sample) of a batch of
256 stacked frames (uint8[4, 84, 84]) runs as the buffer's sample-path
transform. Rows, in batches/s (the loader's start excluded: timing begins at
its first batch):

- ``in-process prefetch=2``: ``ReplayDataset(rb, prefetch=2)``, the shift on
  the prefetch thread;
- ``workers=2``: ``ReplayDataset(rb).dataloader(num_workers=2)``, the
  training process draws, the workers gather and shift;
- ``plain-torch workers=2 limit``: a hand-written IterableDataset over the
  same shared tensors, each worker drawing ``randint`` indices itself and
  doing the same gather and shift, in a plain ``DataLoader(num_workers=2)``.

Targets: ``workers=2`` >= 0.9x the limit, >= 1.6x in-process prefetch. The
ratios need two free cores: on a machine whose cores other processes hold,
workers have nothing to run on.

Run it as a script (``--batches`` shortens a run).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from rbdata import LazyTensorStorage, RandomSampler, ReplayDataset, TensorDictReplayBuffer
from rbdata.loader import ReplayBatch

CAPACITY = 2048
BATCH = 256
FRAMES = (4, 84, 84)
PAD = 4


def random_shift(frames: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """DrQ's augmentation: pad by ``PAD`` and crop back to size at a random offset per sample."""
    b, c, h, w = frames.shape
    padded = F.pad(frames, (PAD, PAD, PAD, PAD))
    oy = torch.randint(0, 2 * PAD + 1, (b, 1, 1, 1), generator=generator)
    ox = torch.randint(0, 2 * PAD + 1, (b, 1, 1, 1), generator=generator)
    rows = oy + torch.arange(h).view(1, 1, h, 1)
    cols = ox + torch.arange(w).view(1, 1, 1, w)
    batch = torch.arange(b).view(b, 1, 1, 1)
    channel = torch.arange(c).view(1, c, 1, 1)
    return padded[batch, channel, rows, cols]


class Shift:
    """The buffer's sample-path transform: shift ``pixels`` (picklable for workers)."""

    def __call__(self, data: TensorDictBase) -> TensorDictBase:
        data.set("pixels", random_shift(data.get("pixels")))
        return data


class PlainWorkers(IterableDataset[ReplayBatch]):
    """The limit: each worker draws, gathers from the shared tensor and shifts by itself."""

    def __init__(self, pixels: torch.Tensor, size: int, batches: int) -> None:
        self.pixels, self.size, self.batches = pixels, size, batches

    def __iter__(self) -> Iterator[ReplayBatch]:
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        for _ in range(worker, self.batches, workers):
            index = torch.randint(self.size, (BATCH,))
            frames = random_shift(self.pixels.index_select(0, index))
            yield ReplayBatch({"pixels": frames, "index": index}, [BATCH])


def make_buffer() -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(CAPACITY, shared_init=True),
        sampler=RandomSampler(),
        batch_size=BATCH,
        transform=Shift(),
    )
    pixels = torch.randint(0, 256, (CAPACITY, *FRAMES), dtype=torch.uint8)
    rb.extend(TensorDict({"pixels": pixels}, [CAPACITY]))
    return rb


def rate(batches: Iterable[Any], count: int) -> float:
    """Batches/s over ``count`` batches after the first (the loader's start excluded)."""
    it = iter(batches)
    next(it)
    start = time.perf_counter()
    for _ in range(count):
        next(it)
    return count / (time.perf_counter() - start)


def bench_workers(batches: int = 100) -> list[tuple[str, float, float | None]]:
    """Rows ``(name, batches_per_s, ratio)`` (see the module doc)."""
    rb = make_buffer()
    total = batches + 1
    with ReplayDataset(rb, num_batches=total, prefetch=2) as ds:
        prefetch = rate(ds, batches)
    with ReplayDataset(rb, num_batches=total) as ds:
        workers = rate(ds.dataloader(num_workers=2), batches)
    # the limit's own copy of the frames, in shared memory as the storage's are
    pixels = rb.sample(CAPACITY)["pixels"].share_memory_()
    plain = DataLoader(PlainWorkers(pixels, len(rb), total), batch_size=None, num_workers=2)
    limit = rate(plain, batches)
    return [
        ("in-process prefetch=2", prefetch, None),
        ("plain-torch workers=2 limit", limit, None),
        ("workers=2 vs plain-torch limit (target >= 0.9)", workers, workers / limit),
        ("workers=2 vs in-process prefetch=2 (target >= 1.6)", workers, workers / prefetch),
    ]


def main(argv: list[str] | None = None) -> None:
    """Print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    args = parser.parse_args(argv)
    for name, value, ratio in bench_workers(args.batches):
        shown = "" if ratio is None else f"  x{ratio:.2f}"
        print(f"{name:52s} {value:8.1f} batches/s{shown}")  # noqa: T201 - a CLI's output


if __name__ == "__main__":
    main()
