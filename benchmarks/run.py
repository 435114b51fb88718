"""rbdata throughput beside the plain-torch limit (and torchrl / cpprb when installed).

Usage::

    python benchmarks/run.py                 # all rows
    python benchmarks/run.py --rows sample,per
    python benchmarks/run.py --rows ray      # the Ray-backed buffer (needs the ray extra)
    python benchmarks/run.py --vs-torchrl    # also torchrl's rows, run in its own venv

Each row prints items (or steps) per second for rbdata and for the limit, and
their ratio (rbdata / limit: 1.0 means as fast as the irreducible work). The
limit keeps one preallocated tensor per key (``_common.Limit``); the sampling
and extend rows also print the packed limit (``_common.PackedLimit``: every
item one byte row, one ``index_select`` per batch, no views, no TensorDict),
and ``--rows stages`` shows where ``sample(256)`` spends its time beyond it
(``bench_stages.py``).
The same row functions run against ``torchrl.data`` (``--lib torchrl``), whose
ReplayBuffer API rbdata shares; ``--vs-torchrl`` runs them in the virtualenv
named by ``RBDATA_TORCHRL_VENV`` (default ``../bench-venvs/torchrl``).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    Alloc,
    ConsumeLimit,
    FreeListConsumeLimit,
    Limit,
    PackedLimit,
    file_alloc,
    fill,
    huge_page_alloc,
    pixel_transitions,
    timeit,
    timeit_pair,
    timeit_rounds,
    transitions,
)
from _sumtree_limit import PrioritizedConsumeLimit, SumTreeLimit  # noqa: E402
from bench_compressed import row_compressed  # noqa: E402

Row = dict[str, object]


def _lib(name: str) -> ModuleType:
    return importlib.import_module("rbdata" if name == "rbdata" else "torchrl.data")


def row_extend(lib: ModuleType) -> Row:
    """Extend 1,000-transition batches into a full LazyTensorStorage(1M) (the ring wrapped).

    Every row was written once before the timing, in the buffer and in the
    limits: the limits' tensors are zero-filled when made (every page of
    them touched), while a storage's rows are reserved and a page is
    committed when a row on it is first written (``storages/_pages.py``), a
    page fault the first fill pays and the wrapped ring does not.
    ``bench_memory.py --rows writers`` times both regimes.
    """
    cap, data = 1_000_000, transitions(1000)
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(cap))
    lim, packed = Limit(cap, data, 256), PackedLimit(cap, data, 256)
    for target in (rb, lim, packed):
        fill(target, cap, transitions)
    t_lib, t_lim, t_packed = timeit_rounds(
        lambda: rb.extend(data), lambda: lim.extend(data), lambda: packed.extend(data)
    )
    return {
        "unit": "items/s",
        "lib": 1000 / t_lib,
        "limit": 1000 / t_lim,
        "packed": 1000 / t_packed,
    }


def _sample_row(
    lib: ModuleType,
    storage: object,
    cap: int,
    make: Callable,
    batch: int = 256,
    alloc: Alloc | None = None,
) -> Row:
    rb = lib.ReplayBuffer(storage=storage)
    fill(rb, cap, make)
    extra = {} if alloc is None else {"alloc": alloc}
    lim, packed = Limit(cap, make(1), batch, **extra), PackedLimit(cap, make(1), batch, **extra)
    fill(lim, cap, make)
    fill(packed, cap, make)
    t_lib, t_lim, t_packed = timeit_rounds(lambda: rb.sample(batch), lim.sample, packed.sample)
    return {
        "unit": "items/s",
        "lib": batch / t_lib,
        "limit": batch / t_lim,
        "packed": batch / t_packed,
    }


def row_sample(lib: ModuleType) -> Row:
    """Uniform sample of 256 from a full LazyTensorStorage(1M) (obs float32[64]).

    The note gives the packed limit over rows in huge pages as well (what
    rbdata's rows of 64 MiB or more ask for), timed in the same rounds.
    """
    cap, batch = 1_000_000, 256
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(cap))
    fill(rb, cap, transitions)
    lim, packed = Limit(cap, transitions(1), batch), PackedLimit(cap, transitions(1), batch)
    huge = PackedLimit(cap, transitions(1), batch, alloc=huge_page_alloc)
    for target in (lim, packed, huge):
        fill(target, cap, transitions)
    t_lib, t_lim, t_packed, t_huge = timeit_rounds(
        lambda: rb.sample(batch), lim.sample, packed.sample, huge.sample
    )
    return {
        "unit": "items/s",
        "lib": batch / t_lib,
        "limit": batch / t_lim,
        "packed": batch / t_packed,
        "note": f"packed limit in huge pages: {batch / t_huge:,.0f} items/s, "
        f"rbdata / it {t_huge / t_lib:.3f}",
    }


def row_pixels(lib: ModuleType) -> Row:
    """Uniform sample of 256 pixel transitions (2x uint8[4,84,84]) from 50k."""
    return _sample_row(lib, lib.LazyTensorStorage(50_000), 50_000, pixel_transitions)


def row_memmap(lib: ModuleType) -> Row:
    """Uniform sample of 256 from a full LazyMemmapStorage(200k).

    Both limits gather from their own memory-mapped files
    (``torch.from_file(..., shared=True)``), as the storage does.
    """
    with tempfile.TemporaryDirectory(prefix="rbdata-bench-") as directory:
        return _sample_row(
            lib,
            lib.LazyMemmapStorage(200_000, scratch_dir=os.path.join(directory, "lib")),
            200_000,
            transitions,
            alloc=file_alloc(directory),
        )


def row_consume(lib: ModuleType) -> Row:
    """consume_after_n_samples=1: extend 100k into the consumed slots, sample 256 until empty.

    One operation is the whole cycle: ``extend`` of 100k transitions (every
    slot was consumed by the cycle before), then ``sample(256)`` while
    ``len(rb) > 0``. The limit (``_common.ConsumeLimit``) does the same with
    per-key tensors, free slots reused in ring order (after a drain: one slice
    copy per key) and ``randperm``; the note gives the free-list limit
    (``_common.FreeListConsumeLimit``: slots reused in the order they were
    freed, torchrl's, so every write is a scatter).
    """
    return _consume_row(lib, lib.RandomSampler(), free_list=True)


def row_consume_wor(lib: ModuleType) -> Row:
    """:func:`row_consume` with a ``SamplerWithoutReplacement`` (the same limit)."""
    return _consume_row(lib, lib.SamplerWithoutReplacement(), free_list=False)


def row_consume_per(lib: ModuleType) -> Row:
    """:func:`row_consume` with ``PrioritizedSampler(100k, 0.7, 0.5)``.

    The limit (``_sumtree_limit.PrioritizedConsumeLimit``) writes in ring order
    as ``ConsumeLimit`` does, gives the written slots the maximum priority in a
    32-ary sum tree, and draws 256 at a time from it, zeroing what it drew.
    """
    cap = CONSUME_CAPACITY
    limit = PrioritizedConsumeLimit(cap, transitions(1), CONSUME_BATCH, 0.7, 0.5)
    sampler = lib.PrioritizedSampler(cap, 0.7, 0.5)
    return {
        **_consume_row(lib, sampler, free_list=False, limit=limit),
        "limit_name": "ring order, sum tree",
    }


CONSUME_CAPACITY, CONSUME_BATCH = 100_000, 256


def _consume_row(
    lib: ModuleType, sampler: object, free_list: bool, limit: ConsumeLimit | None = None
) -> Row:
    cap, batch = CONSUME_CAPACITY, CONSUME_BATCH
    data = transitions(cap)
    rb = lib.TensorDictReplayBuffer(
        storage=lib.LazyTensorStorage(cap), sampler=sampler, consume_after_n_samples=1
    )

    def cycle_lib() -> None:
        rb.extend(data)
        while len(rb):
            rb.sample(batch)

    cycle_lib()  # every slot consumed: the measured cycles write into consumed slots
    lim = limit or ConsumeLimit(cap, data[:1], batch)
    if not free_list:
        t_lib, t_lim = timeit_rounds(cycle_lib, lambda: lim.cycle(data), min_time=4.5, repeats=5)
        return {
            "unit": "items/s",
            "lib": cap / t_lib,
            "limit": cap / t_lim,
            "limit_name": "ring order",
        }
    freelist = FreeListConsumeLimit(cap, data[:1], batch)
    t_lib, t_lim, t_free = timeit_rounds(
        cycle_lib, lambda: lim.cycle(data), lambda: freelist.cycle(data), min_time=4.5, repeats=5
    )
    return {
        "unit": "items/s",
        "lib": cap / t_lib,
        "limit": cap / t_lim,
        "limit_name": "ring order",
        "note": f"free-list limit (slots in the order freed): {cap / t_free:,.0f} items/s, "
        f"rbdata / it {t_free / t_lib:.2f}",
    }


def row_per(lib: ModuleType) -> Row:
    """PrioritizedSampler(1M, 0.7, 0.5): sample 256 with info + update_priority; steps/s.

    The limit (``_sumtree_limit.SumTreeLimit``) is the same step in plain
    torch: a 32-ary sum tree and min tree, the drawn rows gathered, the
    priorities written back. cpprb's compiled tree is noted when installed.
    """
    cap, batch = 1_000_000, 256
    rb = lib.ReplayBuffer(
        storage=lib.LazyTensorStorage(cap), sampler=lib.PrioritizedSampler(cap, 0.7, 0.5)
    )
    fill(rb, cap, lambda n: transitions(n).select("observation"))
    tree = SumTreeLimit(cap, 0.7, 0.5)
    rows = Limit(cap, transitions(1).select("observation"), batch)

    def step() -> None:
        _, info = rb.sample(batch, return_info=True)
        rb.update_priority(info["index"], torch.rand(batch))

    def limit_step() -> None:
        index, _ = tree.sample(batch)
        rows.gather(index)
        tree.update(index, torch.rand(batch))

    t_lib, t_lim = timeit_pair(step, limit_step)
    out: Row = {"unit": "steps/s", "lib": 1 / t_lib, "limit": 1 / t_lim}
    cpprb = _cpprb_per(cap, batch)
    if cpprb is not None:
        out["note"] = f"cpprb: {cpprb:,.0f} steps/s"
    return out


def _cpprb_per(cap: int, batch: int) -> float | None:
    try:
        import cpprb
        import numpy as np
    except ImportError:
        return None
    rb = cpprb.PrioritizedReplayBuffer(cap, {"obs": {"shape": 64}}, alpha=0.7)
    obs = np.random.randn(50_000, 64).astype(np.float32)
    for _ in range(cap // 50_000):
        rb.add(obs=obs)

    def step() -> None:
        s = rb.sample(batch, beta=0.5)
        rb.update_priorities(s["indexes"], np.random.rand(batch) + 1e-3)

    return 1 / timeit(step)


def _slice_row(lib: ModuleType, n: int, obs: int, traj_len: int = 250) -> Row:
    slice_len, batch = 32, 1024
    episode = torch.arange(n) // traj_len
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[traj_len - 1 :: traj_len] = True
    from tensordict import TensorDict

    data = TensorDict(
        {"observation": torch.randn(n, obs), "episode": episode, "next": {"done": done}}, [n]
    )
    rb = lib.ReplayBuffer(
        storage=lib.LazyTensorStorage(n),
        sampler=lib.SliceSampler(slice_len=slice_len, traj_key="episode"),
        batch_size=batch,
    )
    for s in range(0, n, 1_000_000):
        rb.extend(data[s : s + 1_000_000])
    lim = Limit(n, data[:1], batch)
    lim.extend(data)
    starts = (torch.arange(n).view(-1, traj_len)[:, : traj_len - slice_len + 1]).reshape(-1)
    offsets = torch.arange(slice_len)

    def limit_step() -> None:
        s = starts[torch.randint(starts.numel(), (batch // slice_len,))]
        lim.gather((s.unsqueeze(-1) + offsets).reshape(-1))

    t_lib, t_lim = timeit_pair(lambda: rb.sample(), limit_step)
    return {"unit": "items/s", "lib": batch / t_lib, "limit": batch / t_lim, "sec_per_batch": t_lib}


def row_slice(lib: ModuleType) -> Row:
    """SliceSampler(slice_len=32), 1,024 transitions from 1M (trajectories of 250)."""
    return _slice_row(lib, 1_000_000, OBS_SLICE)


def row_slice10m(lib: ModuleType) -> Row:
    """The same at 10M transitions of a small observation (cost must not grow with the buffer)."""
    return _slice_row(lib, 10_000_000, 4)


OBS_SLICE = 64
ROWS: dict[str, Callable[[ModuleType], Row]] = {
    "extend": row_extend,
    "sample": row_sample,
    "pixels": row_pixels,
    "compressed": row_compressed,
    "memmap": row_memmap,
    "consume": row_consume,
    "consume_wor": row_consume_wor,
    "consume_per": row_consume_per,
    "per": row_per,
    "slice": row_slice,
    "slice10m": row_slice10m,
}


# rows with tables of their own (bench_stages.py, bench_loader.py, bench_ray.py)
_SEPARATE = ("stages", "loader", "ray")


def run_rows(lib_name: str, names: list[str]) -> dict[str, Row]:
    """Run the named rows against one library; failures are reported, not raised."""
    torch.set_num_threads(1)
    lib = _lib(lib_name)
    results: dict[str, Row] = {}
    for name in names:
        if name in _SEPARATE:
            continue
        try:
            results[name] = ROWS[name](lib)
        except Exception as err:  # noqa: BLE001 - a failing row must not hide the others
            results[name] = {"error": f"{type(err).__name__}: {err}"[:200]}
        gc.collect()
    return results


def _torchrl_rows(names: list[str]) -> dict[str, Row]:
    root = Path(__file__).resolve().parents[1]
    venv = Path(os.environ.get("RBDATA_TORCHRL_VENV", root.parent / "bench-venvs" / "torchrl"))
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"(torchrl venv not found at {venv}; run scripts/bench_venv.sh)")
        return {}
    cmd = [str(python), __file__, "--lib", "torchrl", "--json", "--rows", ",".join(names)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"(torchrl run failed: {proc.stderr[-500:]})")
        return {}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt(x: object) -> str:
    return f"{x:>12,.0f}" if isinstance(x, (int, float)) else f"{'-':>12}"


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark rows and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join([*ROWS, *_SEPARATE]))
    parser.add_argument("--lib", default="rbdata", choices=["rbdata", "torchrl"])
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="OUT",
        help="print the results as one JSON line; with OUT, print the table and also write "
        "the rows (torchrl's and the loader's included) to the file OUT",
    )
    parser.add_argument("--vs-torchrl", action="store_true")
    args = parser.parse_args(argv)
    names = [r for r in args.rows.split(",") if r]
    unknown = set(names) - set(ROWS) - set(_SEPARATE)
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; choose from {[*ROWS, *_SEPARATE]}")
    results = run_rows(args.lib, names)
    if args.json == "-":
        print(json.dumps(results))
        return
    theirs = _torchrl_rows(names) if args.vs_torchrl else {}
    print(
        f"{'row':<10}{'unit':>9}{'rbdata':>13}{'limit':>13}{'ratio':>8}{'torchrl':>13}{'ratio':>8}"
        f"{'packed':>13}{'ratio':>8}"
    )
    for name, row in results.items():
        if "error" in row:
            print(f"{name:<10} ERROR {row['error']}")
            continue
        ratio = row["lib"] / row["limit"] if "limit" in row else float("nan")
        t = theirs.get(name, {})
        t_val = t.get("lib")
        t_ratio = f"{t_val / row['limit']:>8.3f}" if t_val and "limit" in row else f"{'-':>8}"
        label = f" (limit: {row['limit_name']})" if "limit_name" in row else ""
        packed = row.get("packed")
        p_ratio = f"{row['lib'] / packed:>8.3f}" if packed else f"{'-':>8}"
        print(
            f"{name:<10}{row['unit']:>9}{_fmt(row['lib'])}{_fmt(row.get('limit'))}{ratio:>8.3f}"
            f"{_fmt(t_val)}{t_ratio}{_fmt(packed)}{p_ratio}{label}"
        )
        if "sec_per_batch" in row:
            print(f"{'':<10}{'':>9}  ({row['sec_per_batch'] * 1e3:.3f} ms per batch)")
        if "note" in row:
            print(f"{'':<10}{'':>9}  ({row['note']})")
    stages = []
    if "stages" in names:
        from bench_stages import sample_stages

        print(f"\nwhere sample(256) from 1M spends its time ({args.lib}, us per batch):")
        for stage, cost, total in sample_stages(_lib(args.lib)):
            print(f"  {stage:<36}{cost:>8.1f}{total:>10.1f}")
            stages.append({"stage": stage, "us": cost, "cumulative_us": total})
    loader = []
    if "loader" in names:
        from bench_loader import bench_loader

        for name, steps, ratio in bench_loader():
            print(f"{'loader':<10}{'steps/s':>9}{_fmt(steps)}  {name}: {ratio:.3f}")
            loader.append({"name": name, "steps_per_s": steps, "ratio": ratio})
    ray_rows = []
    if "ray" in names and importlib.util.find_spec("ray") is None:
        print("(ray rows skipped: install the ray extra)")
    elif "ray" in names:
        from bench_ray import bench_ray

        for name, unit, value, ratio, what in bench_ray():
            print(f"{'ray':<10}{unit:>9}{_fmt(value)}  {name}: {ratio:.3f} {what}")
            ray_rows.append({"name": name, "value": value, "ratio": ratio, "what": what})
    if args.json:
        run = {
            "rows": results,
            "torchrl": theirs,
            "stages": stages,
            "loader": loader,
            "ray": ray_rows,
        }
        Path(args.json).write_text(json.dumps(run, indent=1))


if __name__ == "__main__":
    main()
