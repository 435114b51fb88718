"""Memory that grows with the data, and several writer processes into one buffer.

Usage::

    python benchmarks/bench_memory.py                  # rbdata only
    python benchmarks/bench_memory.py --vs-torchrl     # torchrl beside it (its own venv)
    python benchmarks/bench_memory.py --rows extend    # one table: extend or writers

``extend``: a fresh process builds ``ReplayBuffer(LazyTensorStorage(capacity))``
and extends it with 1,000 rows; the row gives that first extend's time and the
process's resident memory growth (``/proc/self/statm``), then the growth per
row over 9,000 more rows (the resident bytes a stored row costs), at
capacities 10k, 1M and 100M, for Atari rows (``pixels`` uint8[4, 84, 84],
28,224 bytes) and small rows (the flat transitions of
``_common.transitions``: two float32[64] observations, 549 bytes). A
capacity the library cannot allocate shows its error.

``writers``: 1 and 4 processes (``torch.multiprocessing``, spawn) extend one
shared buffer with 200,000 small transitions in all, in batches of 100, while
the parent samples; the row gives the transitions written per second.

Each measurement runs in its own interpreter, so the memory of one does not
count in another; torchrl's run in the virtualenv named by
``RBDATA_TORCHRL_VENV`` (default ``../bench-venvs/torchrl``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CAPACITIES = (10_000, 1_000_000, 100_000_000)
ROWS = 1000
TOTAL, BATCH = 200_000, 100  # the writers row: transitions in all, per extend


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _data(kind: str, n: int) -> Any:
    import torch
    from tensordict import TensorDict

    if kind == "atari":
        pixels = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8)
        return TensorDict({"pixels": pixels}, [n])
    sys.path.insert(0, str(HERE))
    from _common import transitions

    return transitions(n)


def _lib(name: str) -> Any:
    import importlib

    return importlib.import_module("rbdata" if name == "rbdata" else "torchrl.data")


def child_extend(lib_name: str, kind: str, capacity: int) -> dict[str, Any]:
    """One first extend of ``ROWS`` rows into a fresh buffer of ``capacity``."""
    lib = _lib(lib_name)
    data = _data(kind, ROWS)
    rb = lib.ReplayBuffer(storage=lib.LazyTensorStorage(capacity))
    base = _rss()
    start = time.perf_counter()
    try:
        rb.extend(data)
    except (RuntimeError, MemoryError) as error:  # an allocation refused
        return {"error": str(error).splitlines()[0][:80]}
    seconds = time.perf_counter() - start
    first = _rss()
    more = min(capacity - ROWS, 9 * ROWS)  # the growth per row, without one-time costs
    for _ in range(more // ROWS):
        rb.extend(data)
    per_row = (_rss() - first) / more if more else None
    return {"seconds": seconds, "rss_bytes": first - base, "rows": ROWS, "per_row": per_row}


def _writer(rb: Any, n: int, ready: Any, go: Any, done: Any) -> None:
    data = _data("small", BATCH)
    ready.put(1)
    go.wait()
    for _ in range(n // BATCH):
        rb.extend(data)
    done.put(1)


def child_writers(lib_name: str, processes: int) -> dict[str, Any]:
    """``processes`` spawned writers fill one shared buffer while this process samples."""
    import torch.multiprocessing as mp

    lib = _lib(lib_name)
    rb = lib.TensorDictReplayBuffer(storage=lib.LazyTensorStorage(TOTAL), batch_size=256)
    rb.extend(_data("small", BATCH))  # the storage is laid out (and shared) here
    rb.empty()
    rb.share()
    ctx = mp.get_context("spawn")
    ready, done, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_writer, args=(rb, TOTAL // processes, ready, go, done))
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=120)
    start = time.perf_counter()
    go.set()
    finished, samples = 0, 0
    while finished < processes:
        while not done.empty():
            done.get()
            finished += 1
        if len(rb) >= 256:
            rb.sample()
            samples += 1
    seconds = time.perf_counter() - start
    for proc in procs:
        proc.join()
    return {"seconds": seconds, "items": len(rb), "write_count": rb.write_count, "samples": samples}


def _run_child(python: str, args: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [python, str(Path(__file__).resolve()), "--child", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["died"])[-1][:80]}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _pythons(vs_torchrl: bool) -> dict[str, str]:
    pythons = {"rbdata": sys.executable}
    if vs_torchrl:
        default = HERE.parent.parent / "bench-venvs" / "torchrl"
        venv = os.environ.get("RBDATA_TORCHRL_VENV", str(default))
        pythons["torchrl"] = str(Path(venv) / "bin" / "python")
    return pythons


def table_extend(vs_torchrl: bool) -> list[dict[str, Any]]:
    """The ``extend`` rows: first-extend time and resident bytes per row."""
    out = []
    for kind in ("atari", "small"):
        for capacity in CAPACITIES:
            row: dict[str, Any] = {"kind": kind, "capacity": capacity}
            for lib, python in _pythons(vs_torchrl).items():
                row[lib] = _run_child(python, ["extend", lib, kind, str(capacity)])
            out.append(row)
    return out


def _cell(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"refused ({result['error'][:40]})"
    rss = result["rss_bytes"] / 2**20
    return f"{result['seconds'] * 1e3:6.1f} ms {rss:6.1f} MiB {result['per_row']:7.0f} B/row"


def print_extend(rows: list[dict[str, Any]]) -> None:
    libs = [k for k in rows[0] if k not in ("kind", "capacity")]
    print(
        "first extend of 1,000 rows: its time and RSS growth; then RSS growth per row over "
        "9,000 more rows"
    )
    print(f"{'rows':<6} {'capacity':>11}  " + "  ".join(f"{lib:<34}" for lib in libs))
    for row in rows:
        cells = "  ".join(f"{_cell(row[lib]):<34}" for lib in libs)
        print(f"{row['kind']:<6} {row['capacity']:>11,}  {cells}")


def table_writers(vs_torchrl: bool) -> list[dict[str, Any]]:
    """The ``writers`` rows: transitions written per second by 1 and 4 processes."""
    out = []
    for processes in (1, 4):
        row: dict[str, Any] = {"processes": processes}
        for lib, python in _pythons(vs_torchrl).items():
            row[lib] = _run_child(python, ["writers", lib, str(processes)])
        out.append(row)
    return out


def print_writers(rows: list[dict[str, Any]]) -> None:
    libs = [k for k in rows[0] if k != "processes"]
    print(
        f"{TOTAL:,} small transitions (extend of {BATCH}) into one shared buffer by spawned "
        "writers while the parent samples: transitions/s (parent's batches of 256)"
    )
    print("writers  " + "  ".join(f"{lib:<26}" for lib in libs))
    for row in rows:
        cells = []
        for lib in libs:
            r = row[lib]
            if "error" in r:
                cells.append(f"failed ({r['error'][:30]})")
            else:
                ok = "" if r["items"] == r["write_count"] == TOTAL else " (count off)"
                cells.append(f"{TOTAL / r['seconds']:9.0f}/s {r['samples']:6d} batches{ok}")
        print(f"{row['processes']:<8} " + "  ".join(f"{c:<26}" for c in cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs-torchrl", action="store_true")
    parser.add_argument("--rows", default="extend,writers")
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        what, *rest = args.child
        if what == "extend":
            lib, kind, capacity = rest
            print(json.dumps(child_extend(lib, kind, int(capacity))))
        else:
            lib, processes = rest
            print(json.dumps(child_writers(lib, int(processes))))
        return 0
    results: dict[str, Any] = {}
    rows = args.rows.split(",")
    if "extend" in rows:
        results["extend"] = table_extend(args.vs_torchrl)
        print_extend(results["extend"])
    if "writers" in rows:
        results["writers"] = table_writers(args.vs_torchrl)
        print_writers(results["writers"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
