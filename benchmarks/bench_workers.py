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

The ``ddp`` rows (issue 34, item 2) train two gloo DDP ranks (Lightning,
``ddp_spawn``, CPU) on batches of 256 frames from a buffer of
``--ddp-capacity`` frames, with a buffer each (the default) and with one
buffer both share (``ReplayDataModule(share_across_ranks=True)``), each
rank with half the cores as torch threads: training steps/s of rank 0 (its
first step excluded) and the ranks' memory once trained, as the sum of their
RSS (shared pages counted in every rank that touched them) and of their PSS
(shared pages split between the ranks: the memory the machine spends). One
shared buffer holds one copy of the frames, two buffers two.

Run it as a script: ``--rows workers,ddp`` picks the rows (default: both),
``--batches`` / ``--steps`` shorten a run, ``--quick`` runs everything
briefly (a smoke check, not a measurement).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from rbdata import LazyTensorStorage, RandomSampler, ReplayDataset, TensorDictReplayBuffer
from rbdata.lightning import ReplayDataModule
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
    pixels = rb[:]["pixels"].share_memory_()
    plain = DataLoader(PlainWorkers(pixels, len(rb), total), batch_size=None, num_workers=2)
    limit = rate(plain, batches)
    return [
        ("in-process prefetch=2", prefetch, None),
        ("plain-torch workers=2 limit", limit, None),
        ("workers=2 vs plain-torch limit (target >= 0.9)", workers, workers / limit),
        ("workers=2 vs in-process prefetch=2 (target >= 1.6)", workers, workers / prefetch),
    ]


# ------------------------------------------------------------------ DDP rows
def _memory_mb() -> tuple[float, float]:
    """This process's ``(RSS, PSS)`` in MB (``/proc/self/smaps_rollup``).

    Freed heap memory is handed back to the kernel first (glibc's
    ``malloc_trim``), so that what the allocator kept does not count.
    """
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    values = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                values[key] = int(rest.split()[0]) / 1024
    return values["Rss"], values["Pss"]


class _FramesBuffer:
    """The factory: a buffer of ``capacity`` random frames (run once per buffer)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity

    def __call__(self) -> TensorDictReplayBuffer:
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(self.capacity), batch_size=BATCH)
        chunk = torch.randint(0, 256, (256, *FRAMES), dtype=torch.uint8)
        for start in range(0, self.capacity, chunk.shape[0]):
            n = min(chunk.shape[0], self.capacity - start)
            rb.extend(TensorDict({"pixels": chunk[:n]}, [n]))
        return rb


class _Learner(L.LightningModule):
    """A step that reads the whole batch; times its steps and reports its memory to ``out``."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))
        self.out = out
        self.started = 0.0
        self.steps = 0

    def setup(self, stage: str) -> None:
        # each rank its share of the cores (torch's default, every core in every rank,
        # oversubscribes them: OpenMP threads then wait for each other at every copy)
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.steps == 1:  # the first step (loader start, DDP's first sync) excluded
            self.started = time.perf_counter()
        self.steps += 1
        return self.w * batch["pixels"].float().mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def on_train_end(self) -> None:
        rate = (self.steps - 1) / (time.perf_counter() - self.started)
        self.trainer.strategy.barrier()  # every rank has read what it reads
        rss, pss = _memory_mb()
        report = {"steps_per_s": rate, "rss": rss, "pss": pss}
        Path(self.out, f"rank{self.global_rank}.json").write_text(json.dumps(report))


def _ddp_run(shared: bool, steps: int, capacity: int) -> tuple[float, float, float]:
    """``(rank 0's steps/s, RSS sum, PSS sum)`` of two gloo ranks (see the module doc)."""
    with tempfile.TemporaryDirectory() as out:
        os.environ.pop("MASTER_PORT", None)
        dm = ReplayDataModule(
            _FramesBuffer(capacity),
            batch_size=BATCH,
            batches_per_epoch=steps,
            checkpoint_buffer=False,
            seed=0,
            share_across_ranks=shared,
        )
        trainer = L.Trainer(
            accelerator="cpu",
            devices=2,
            strategy="ddp_spawn",
            max_steps=steps,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=out,
        )
        trainer.fit(_Learner(out), datamodule=dm)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in (0, 1)]
    return ranks[0]["steps_per_s"], sum(r["rss"] for r in ranks), sum(r["pss"] for r in ranks)


def bench_ddp(steps: int = 200, capacity: int = 8192) -> list[tuple[str, str]]:
    """Rows ``(name, figures)``: two gloo ranks, a buffer each vs one shared (module doc)."""
    copy_mb = capacity * torch.Size(FRAMES).numel() / 2**20
    rows = []
    each = _ddp_run(False, steps, capacity)
    one = _ddp_run(True, steps, capacity)
    for name, (rate, rss, pss) in (("a buffer each", each), ("one shared buffer", one)):
        rows.append(
            (
                f"ddp 2 gloo ranks, {name}",
                f"{rate:8.1f} steps/s  RSS sum {rss:7.0f} MB  PSS sum {pss:7.0f} MB",
            )
        )
    rows.append(
        (
            f"ddp shared vs each (frames: {copy_mb:.0f} MB a copy)",
            f"steps/s x{one[0] / each[0]:.2f}  PSS saved {each[2] - one[2]:.0f} MB",
        )
    )
    return rows


def main(argv: list[str] | None = None) -> None:
    """Print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="workers,ddp", help="workers, ddp or both")
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--steps", type=int, default=200, help="training steps of a ddp run")
    parser.add_argument("--ddp-capacity", type=int, default=8192, help="frames in a ddp buffer")
    parser.add_argument("--quick", action="store_true", help="a brief smoke run")
    args = parser.parse_args(argv)
    rows = {r.strip() for r in args.rows.split(",")}
    unknown = rows - {"workers", "ddp"}
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}: pick from workers, ddp")
    if args.quick:
        args.batches, args.steps, args.ddp_capacity = 5, 5, 512
    if "workers" in rows:
        for name, value, ratio in bench_workers(args.batches):
            shown = "" if ratio is None else f"  x{ratio:.2f}"
            print(f"{name:52s} {value:8.1f} batches/s{shown}")  # noqa: T201 - a CLI's output
    if "ddp" in rows:
        for name, figures in bench_ddp(args.steps, args.ddp_capacity):
            print(f"{name:52s} {figures}")  # noqa: T201 - a CLI's output


if __name__ == "__main__":
    main()
