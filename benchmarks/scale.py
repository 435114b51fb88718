"""Cost per batch as the buffer grows: 1M, 10M and 100M transitions in LazyMemmapStorage.

Usage::

    python benchmarks/scale.py                        # 1M, 10M, 100M (100M needs ~5 GB of disk)
    python benchmarks/scale.py --sizes 1e3,1e4        # the same code at a tiny size (the tests)
    python benchmarks/scale.py --dir /mnt/scratch     # where the memory-mapped files go

Each size fills one LazyMemmapStorage (under a temporary directory, deleted
afterwards) with transitions of a small observation (float32[4] observation
and next observation, int64 action, float reward, bool done; trajectories of
250 steps), in chunks of 1M with a progress bar, and reports the fill rate.
Three buffers then share that storage, each sampler told about every slot as
the buffer's own ``extend`` would: uniform sampling of 256, prioritized
sampling of 256 with its priority update, and slice sampling of 32 slices of
32 steps. Each row gives the milliseconds per batch (this thread's CPU time,
median of rounds) and the process's resident memory: anonymous (what the
samplers hold) and file-backed (pages of the memory-mapped data currently
mapped in; the data itself stays on disk). The last lines compare every
size's cost with the smallest one's (the goal: within 1.5x at 100M).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tensordict import TensorDict
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import timeit  # noqa: E402

import rbdata  # noqa: E402

Row = dict[str, float]
CHUNK, TRAJ_LEN, BATCH, SLICE_LEN, SLICE_BATCH = 1_000_000, 250, 256, 32, 1024
DEFAULT_SIZES = "1e6,1e7,1e8"


def small_transitions(n: int) -> TensorDict:
    """``n`` transitions of a float32[4] observation; an episode ends every 250 steps."""
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[TRAJ_LEN - 1 :: TRAJ_LEN] = True
    return TensorDict(
        {
            "observation": torch.randn(n, 4),
            "action": torch.randint(0, 4, (n,)),
            "next": {"observation": torch.randn(n, 4), "reward": torch.randn(n, 1), "done": done},
        },
        [n],
    )


def fill(rb: rbdata.ReplayBuffer, n: int) -> float:
    """Write ``n`` transitions into ``rb`` in chunks (one chunk of data reused); rows per second."""
    chunk = small_transitions(min(CHUNK, n))
    start = time.perf_counter()
    with tqdm(total=n, unit="rows", unit_scale=True, desc=f"fill {n:,}", leave=False) as bar:
        for written in range(0, n, CHUNK):
            step = min(CHUNK, n - written)
            rb.extend(chunk[:step])
            bar.update(step)
    return n / (time.perf_counter() - start)


def attach(sampler: rbdata.Sampler, n: int) -> None:
    """Tell ``sampler`` that slots ``0 .. n - 1`` hold data, as a buffer's ``extend`` does."""
    for start in range(0, n, CHUNK):
        sampler.extend(torch.arange(start, min(start + CHUNK, n)))


def resident_mb() -> tuple[float, float]:
    """(anonymous, file-backed) resident memory of this process in MB (Linux; else NaNs)."""
    fields = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                fields[key] = value
    except OSError:
        return float("nan"), float("nan")
    kb = [float(fields.get(k, "nan kB").split()[0]) for k in ("RssAnon", "RssFile")]
    return kb[0] / 1024, kb[1] / 1024


def measure(n: int, directory: str, min_time: float) -> Row:
    """Fill ``n`` transitions under ``directory`` and time one batch of each sampler."""
    storage = rbdata.LazyMemmapStorage(n, scratch_dir=directory)
    uniform = rbdata.ReplayBuffer(storage=storage)
    fill_rate = fill(uniform, n)
    prioritized = rbdata.ReplayBuffer(
        storage=storage, sampler=rbdata.PrioritizedSampler(n, alpha=0.7, beta=0.5)
    )
    sliced = rbdata.ReplayBuffer(
        storage=storage,
        sampler=rbdata.SliceSampler(slice_len=SLICE_LEN, end_key=("next", "done")),
        batch_size=SLICE_BATCH,
    )
    for rb in (prioritized, sliced):
        attach(rb.sampler, n)
    priorities = torch.rand(BATCH) + 0.01

    def per_step() -> None:
        _, info = prioritized.sample(BATCH, return_info=True)
        prioritized.update_priority(info["index"], priorities)

    steps: dict[str, Callable[[], object]] = {
        "uniform": lambda: uniform.sample(BATCH),
        "prioritized": per_step,
        "slice": sliced.sample,
    }
    row: Row = {"size": n, "fill_rows_per_s": fill_rate}
    for name, step in steps.items():
        row[f"{name}_ms"] = timeit(step, min_time=min_time) * 1e3
    row["rss_anon_mb"], row["rss_file_mb"] = resident_mb()
    return row


def report(rows: list[Row]) -> None:
    """Print one line per size, then each size's cost relative to the smallest size."""
    print(
        f"{'size':>12}{'fill rows/s':>14}{'uniform ms':>12}{'prio ms':>10}{'slice ms':>10}"
        f"{'rss anon MB':>13}{'rss file MB':>13}"
    )
    for row in rows:
        print(
            f"{row['size']:>12,.0f}{row['fill_rows_per_s']:>14,.0f}{row['uniform_ms']:>12.3f}"
            f"{row['prioritized_ms']:>10.3f}{row['slice_ms']:>10.3f}"
            f"{row['rss_anon_mb']:>13,.0f}{row['rss_file_mb']:>13,.0f}"
        )
    base = rows[0]
    for row in rows[1:]:
        ratios = ", ".join(
            f"{name} {row[f'{name}_ms'] / base[f'{name}_ms']:.2f}x"
            for name in ("uniform", "prioritized", "slice")
        )
        print(f"{row['size']:>12,.0f} vs {base['size']:,.0f}: {ratios}")


def main(argv: list[str] | None = None) -> list[Row]:
    """Run every size, print the table and return its rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated, e.g. 1e6,1e7")
    parser.add_argument("--dir", default=None, help="parent of the temporary data directories")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds timed per sampler")
    args = parser.parse_args(argv)
    try:
        sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    except ValueError:
        parser.error(f"--sizes must be comma-separated numbers, got {args.sizes!r}")
    if not sizes or min(sizes) < TRAJ_LEN:
        parser.error(f"--sizes must be at least {TRAJ_LEN} (one trajectory), got {sizes}")
    torch.set_num_threads(1)
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="rbdata-scale-", dir=args.dir) as directory:
            rows.append(measure(n, directory, args.min_time))
            gc.collect()  # unmap the file before its directory goes
    report(rows)
    return rows


if __name__ == "__main__":
    main()
