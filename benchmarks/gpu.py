"""The replay path on an accelerator: a device-resident buffer, a device sum tree, a CPU loader.

Usage::

    python benchmarks/gpu.py                      # on CUDA
    python benchmarks/gpu.py --device cpu --tiny  # the same code as a smoke test (the tests)

Rows (each beside its limit, with their ratio, as ``benchmarks/run.py`` prints):

- ``uniform``: ``sample(65,536)`` from a ``LazyTensorStorage(1M, device=...)``
  buffer (obs float32[64] transitions), in GB/s of sampled rows, beside the
  device's copy bandwidth measured on the same number of bytes
  (``torch.empty(...).copy_``). Target: >= 0.5.
- ``per 1M`` / ``per 10M``: prioritized ``sample(65,536)`` with its
  ``update_priority`` through a buffer over a device storage, in ms per
  batch, beside the sum tree alone on the device (sample, weights, update).
  Target: <= 1 ms at 10M.
- ``loader``: training steps per second of a loop fed by
  ``ReplayDataset(device=..., pin_memory=True, prefetch=2)`` over a CPU
  buffer, beside the same step on one batch already on the device.
  Target: >= 0.95.

Times are wall-clock with the device synchronized around each timed run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fill, transitions  # noqa: E402

import rbdata  # noqa: E402
from rbdata.samplers._sumtree import _sum_tree  # noqa: E402 - the tree alone is the limit

Row = dict[str, object]


@dataclass(frozen=True)
class Sizes:
    """Capacities, batch sizes and the training step's width of one run."""

    uniform_capacity: int
    per_capacities: tuple[int, ...]
    batch: int
    loader_batch: int
    loader_steps: int
    hidden: int


FULL = Sizes(1_000_000, (1_000_000, 10_000_000), 65_536, 4096, 200, 2048)
TINY = Sizes(20_000, (20_000, 50_000), 1024, 256, 20, 64)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(
    fn: Callable[[], object], device: torch.device, calls: int, rounds: int = 5
) -> float:
    """Median wall seconds per call over ``rounds`` runs of ``calls`` calls (after a warm-up)."""
    for _ in range(max(1, calls // 4)):
        fn()
    times = []
    for _ in range(rounds):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def row_uniform(device: torch.device, sizes: Sizes) -> Row:
    """Uniform sample of a batch from a device buffer vs copying the same bytes on the device."""
    cap, batch = sizes.uniform_capacity, sizes.batch
    rb = rbdata.ReplayBuffer(storage=rbdata.LazyTensorStorage(cap, device=device))
    fill(rb, cap, lambda n: transitions(n).to(device))
    sample = rb.sample(batch)
    nbytes = sum(v.numel() * v.dtype.itemsize for v in sample.values(True, True))
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    t_sample = seconds_per_call(lambda: rb.sample(batch), device, 50)
    t_copy = seconds_per_call(lambda: dst.copy_(src), device, 50)
    return {"unit": "GB/s", "lib": nbytes / t_sample / 1e9, "limit": nbytes / t_copy / 1e9}


def row_prioritized(device: torch.device, capacity: int, batch: int) -> Row:
    """Prioritized sample + update_priority through a buffer vs the device sum tree alone."""
    rb = rbdata.ReplayBuffer(
        storage=rbdata.LazyTensorStorage(capacity, device=device),
        # device=None: the priorities follow a CUDA storage onto its device (torchrl's rule)
        sampler=rbdata.PrioritizedSampler(capacity, alpha=0.7, beta=0.5),
    )
    fill(rb, capacity, lambda n: transitions(n, obs=4).select("observation").to(device))
    priorities = torch.rand(batch, device=device) + 0.01

    def buffer_step() -> None:
        _, info = rb.sample(batch, return_info=True)
        rb.update_priority(info["index"], priorities)

    tree = _sum_tree(capacity, device=device)
    tree.set_leaves(torch.rand(capacity, device=device) + 0.01)
    generator = torch.Generator(device=device).manual_seed(0)

    def tree_step() -> None:
        index, values = tree.sample_with_values(batch, generator)
        (values / tree.min_tensor).pow_(-0.5)
        tree.update(index, priorities.pow(0.7), reduce="amax", positive=True)

    ms_buffer = seconds_per_call(buffer_step, device, 20) * 1e3
    ms_tree = seconds_per_call(tree_step, device, 20) * 1e3
    # ms per batch: the ratio is limit / lib so that 1.0 means as fast as the tree alone
    return {"unit": "ms/batch", "lib": ms_buffer, "limit": ms_tree, "ratio": ms_tree / ms_buffer}


def _train_step(device: torch.device, hidden: int) -> Callable[[torch.Tensor], None]:
    """One optimizer step of an MLP on a batch of observations, on ``device``."""
    model = torch.nn.Sequential(
        torch.nn.Linear(64, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step(obs: torch.Tensor) -> None:
        loss = model(obs).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def row_loader(device: torch.device, sizes: Sizes) -> Row:
    """A training loop fed from a CPU buffer through ReplayDataset vs the step alone."""
    cap, batch, steps = sizes.uniform_capacity, sizes.loader_batch, sizes.loader_steps
    rb = rbdata.ReplayBuffer(storage=rbdata.LazyTensorStorage(cap))
    fill(rb, cap, transitions)
    step = _train_step(device, sizes.hidden)
    resident = rb.sample(batch)["observation"].to(device)

    def alone() -> None:
        for _ in range(steps):
            step(resident)

    def loop() -> None:
        dataset = rbdata.ReplayDataset(
            rb,
            batch_size=batch,
            num_batches=steps,
            prefetch=2,
            pin_memory=device.type == "cuda",
            device=device,
        )
        for sample in DataLoader(dataset, batch_size=None):
            step(sample["observation"])

    t_alone = seconds_per_call(alone, device, 1, rounds=3)
    t_loop = seconds_per_call(loop, device, 1, rounds=3)
    return {"unit": "steps/s", "lib": steps / t_loop, "limit": steps / t_alone}


def run(device: torch.device, sizes: Sizes) -> dict[str, Row]:
    """Every row, by name."""
    rows = {"uniform": row_uniform(device, sizes)}
    for capacity in sizes.per_capacities:
        rows[f"per {capacity:,}"] = row_prioritized(device, capacity, sizes.batch)
    rows["loader"] = row_loader(device, sizes)
    return rows


def report(rows: dict[str, Row], device: torch.device) -> None:
    """Print one line per row: value, limit and their ratio (1.0: as fast as the limit)."""
    print(f"device: {device} ({_device_name(device)})")
    print(f"{'row':<16}{'unit':>9}{'rbdata':>12}{'limit':>12}{'ratio':>8}")
    for name, row in rows.items():
        ratio = row.get("ratio", row["lib"] / row["limit"])  # type: ignore[operator]
        print(f"{name:<16}{row['unit']:>9}{row['lib']:>12,.3f}{row['limit']:>12,.3f}{ratio:>8.3f}")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def main(argv: list[str] | None = None) -> dict[str, Row]:
    """Run the rows on ``--device`` and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke test)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA device; pass --device cpu for a smoke run")
    torch.set_num_threads(1)
    rows = run(device, TINY if args.tiny else FULL)
    report(rows, device)
    return rows


if __name__ == "__main__":
    main()
