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
``_common.transitions``: two float32[64] observations, 538 bytes). A
capacity the library cannot allocate shows its error.

``writers``: 1 and 4 processes (``torch.multiprocessing``, spawn) extend one
shared buffer while the parent waits for them (idle), or samples batches of 256
flat out or at 100 batches/s (a learner whose step takes the rest of its time):
800,000 small transitions in all, in batches of 100, or 40,000 Atari rows in
batches of 10; the row gives the transitions written per second from the start
signal until every writer is done, the median of ``--rounds`` rounds (each
round runs 1 then 4 writers, so the machine's load swings move both alike), and
the 4 / 1 ratio of those medians. Each row is measured in two regimes
(``--fills``): ``first``, the buffer's first fill, where every page of the
rows is committed (and zeroed) by the write that reaches it, and
``wrapped``, the buffer already full once (filled by the parent before the
writers start), where every write overwrites rows in place, as in a run
longer than the buffer. The ``limit`` column is the irreducible work
in plain torch, measured the same way: one preallocated ``uint8`` block of
every row (544 bytes a small row, its 538 bytes of leaves rounded up to 8;
28,224 an Atari row) in shared memory that is sparse until written, as rbdata's
rows (a ``memfd`` grown with ``ftruncate``; torch's
``UntypedStorage._new_shared`` would commit and zero every page before the
clock starts) with a region of rows per writer; writer ``i`` copies a
preallocated batch after another into its region and counts them in its own
cell of a shared tensor, with no lock, until the cells sum to the total (as
rbdata's writers stop at the shared write count); the parent gathers rows
already written with ``randint`` and ``index_select``; ``wrapped``, its
block is written once by the parent first.

``--threads`` sets torch's intra-op threads in every process of the writers
rows: 1 (the default, as torchrl's collectors set in their workers) or
``default`` (torch's own, one per core, what a process the user spawns gets).
The limit's writers copy on their calling thread either way, as rbdata's do
into shared rows.

Each measurement runs in its own interpreter, so the memory of one does not
count in another; torchrl's run in the virtualenv named by
``RBDATA_TORCHRL_VENV`` (default ``../bench-venvs/torchrl``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CAPACITIES = (10_000, 1_000_000, 100_000_000)
ROWS = 1000
# the writers rows: transitions in all and per extend, by row kind
WRITES = {"small": (800_000, 100), "atari": (40_000, 10)}
PACES = (-1.0, 0.0, 100.0)  # the parent in the writers rows: idle, sampling flat out, at 100/s


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


def _writer(rb: Any, kind: str, total: int, ready: Any, go: Any, done: Any) -> None:
    """Extend ``rb`` until its shared write count reaches ``total``; report the rows written."""
    batch = WRITES[kind][1]
    data = _data(kind, batch)
    ready.put(1)
    go.wait()
    written = 0
    while rb.write_count < total:
        rb.extend(data)
        written += batch
    done.put(written)


def _race(
    target: Any, args: list[tuple[Any, ...]], sample: Callable[[], bool], pace: float
) -> tuple[float, int, list[int]]:
    """Spawned writers ``target(*a, ready, go, done)``, one per ``a`` in ``args``, run at once.

    This process waits for them (``pace`` < 0), or calls ``sample()`` (True
    when it drew a batch) flat out (``pace`` 0) or ``pace`` times per second,
    as a learner whose step takes the rest of its time. Returns the seconds
    from ``go`` until every writer reported done, the batches drawn, and what
    each writer reported (the rows it wrote).
    """
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, done, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=(*a, ready, go, done)) for a in args]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=120)
    start = time.perf_counter()
    go.set()
    reports: list[int] = []
    samples, due = 0, start
    while len(reports) < len(procs):
        if pace < 0:  # idle: only wait
            reports.append(done.get(timeout=300))
            continue
        while not done.empty():
            reports.append(done.get())
        if time.perf_counter() >= due and sample():
            samples += 1
            due += 1 / pace if pace else 0.0
        elif pace:
            time.sleep(0.0005)
    seconds = time.perf_counter() - start
    for proc in procs:
        proc.join()
    return seconds, samples, reports


def child_writers(
    lib_name: str, kind: str, processes: int, pace: float, wrapped: bool
) -> dict[str, Any]:
    """``processes`` spawned writers write ``total`` rows into one shared buffer.

    This process samples meanwhile (see :func:`_race`); ``wrapped``, it
    fills the buffer once first, so that every row the writers write
    overwrites one.
    """
    lib = _lib(lib_name)
    total, batch = WRITES[kind]
    rb = lib.TensorDictReplayBuffer(storage=lib.LazyTensorStorage(total), batch_size=256)
    rb.extend(_data(kind, batch))  # the storage is laid out (and shared) here
    rb.empty()
    rb.share()
    if wrapped:
        block = _data(kind, 1000)
        for _ in range(total // 1000):
            rb.extend(block)
    before = rb.write_count

    def sample() -> bool:
        if len(rb) < 256:
            return False
        rb.sample()
        return True

    stop = before + total
    seconds, samples, written = _race(_writer, [(rb, kind, stop)] * processes, sample, pace)
    wrote = rb.write_count - before
    return {
        "seconds": seconds,
        "rate": wrote / seconds,
        "items": len(rb),
        "write_count": rb.write_count,
        "samples": samples,
        "exact": len(rb) == total and wrote == sum(written) >= total,
    }


def _row_bytes(kind: str) -> int:
    """The bytes of one stored row of ``kind``: its leaves side by side, rounded up to 8."""
    data = _data(kind, 1)
    leaves = (data.get(k) for k in data.keys(True, True))
    return -(-sum(leaf[0].numel() * leaf.element_size() for leaf in leaves) // 8) * 8


def _limit_writer(
    store: Any, progress: Any, batch: int, writer: int, total: int, ready: Any, go: Any, done: Any
) -> None:
    import torch

    torch.set_num_threads(1)  # each copy on this thread, as rbdata's into shared rows
    src = torch.full((batch, store.shape[1]), writer + 1, dtype=torch.uint8)  # checked after
    at = writer * total  # this writer's region: room for every row, sparse where unwritten
    ready.put(1)
    go.wait()
    while int(progress.sum()) < total:
        store[at : at + batch].copy_(src)
        at += batch
        progress[writer] += batch  # this writer's cell only: no lock
    done.put(int(progress[writer]))


def child_limit_writers(kind: str, processes: int, pace: float, wrapped: bool) -> dict[str, Any]:
    """The ``limit`` of ``child_writers`` in plain torch: each writer copies into its own rows.

    One preallocated ``uint8`` block of rows in shared memory, sparse until
    written as rbdata's shared rows (a ``memfd`` grown with ``ftruncate``:
    each page is zeroed at its first write), with a region of ``total`` rows
    per writer; writer ``i`` copies one preallocated batch after another into
    its region and counts them in its own cell of a shared tensor, until the
    cells sum to ``total`` (as rbdata's writers stop at the shared write
    count), with no lock; this process gathers rows already written with
    ``randint`` and ``index_select``. ``wrapped``, this process writes the
    whole block once first, so that every page is committed before the
    writers start.
    """
    import torch

    total, batch = WRITES[kind]
    nbytes = processes * total * _row_bytes(kind)
    fd = os.memfd_create("limit-rows", os.MFD_CLOEXEC)  # sparse until written, as rbdata's rows
    os.ftruncate(fd, nbytes)
    storage = torch.UntypedStorage._new_shared_fd_cpu(fd, nbytes)  # type: ignore[attr-defined]
    os.close(fd)
    store = torch.empty(0, dtype=torch.uint8).set_(storage).view(processes * total, -1)
    progress = torch.zeros(processes, dtype=torch.int64).share_memory_()
    if wrapped:
        store.fill_(0)

    def sample() -> bool:
        writer = torch.randint(0, processes, (256,))
        offset = (torch.rand(256) * progress[writer]).long()  # a row its writer has written
        store.index_select(0, writer * total + offset)
        return True

    args = [(store, progress, batch, i, total) for i in range(processes)]
    seconds, samples, written = _race(_limit_writer, args, sample, pace)
    counts = progress.tolist()
    regions = [store[i * total : i * total + n] for i, n in enumerate(counts)]
    exact = sorted(written) == sorted(counts) and all(
        not r.numel() or r.amin() == r.amax() == i + 1 for i, r in enumerate(regions)
    )
    rows = sum(counts)
    return {"seconds": seconds, "rate": rows / seconds, "samples": samples, "exact": exact}


def _run_child(python: str, args: list[str], threads: str = "1") -> dict[str, Any]:
    """One measurement in a fresh ``python``: its JSON result, or its error.

    ``threads`` is torch's intra-op thread count in every process of it: "1"
    (as torchrl's collectors set in their workers), or "default" (torch's, one
    per core: what a spawned process of the user's gets).
    """
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads != "default":
        env["OMP_NUM_THREADS"] = threads
    proc = subprocess.run(
        [python, str(Path(__file__).resolve()), "--child", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
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


def table_writers(
    vs_torchrl: bool, kinds: list[str], fills: list[str], rounds: int, threads: str
) -> list[dict[str, Any]]:
    """The ``writers`` rows: transitions written per second by 1 and 4 processes.

    One row per kind, fill regime, parent's pace and writer count. Each
    round runs 1 then 4 writers for every library; a row keeps every round's
    rate and their median.
    """
    pythons = {**_pythons(vs_torchrl), "limit": sys.executable}
    cases = [(k, f, p) for k in kinds for f in fills for p in PACES]
    runs: dict[tuple[str, str, float, int, str], list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for kind, fill, pace in cases:
            for processes in (1, 4):
                for lib, python in pythons.items():
                    args = ["writers", lib, kind, str(processes), str(pace), fill]
                    runs.setdefault((kind, fill, pace, processes, lib), []).append(
                        _run_child(python, args, threads)
                    )
    out = []
    for kind, fill, pace in cases:
        for processes in (1, 4):
            row: dict[str, Any] = {"kind": kind, "fill": fill, "pace": pace, "processes": processes}
            for lib in pythons:
                results = runs[(kind, fill, pace, processes, lib)]
                failed = [r for r in results if "error" in r]
                if failed:
                    row[lib] = failed[0]
                    continue
                rates = [r["rate"] for r in results]
                row[lib] = {
                    "rate": statistics.median(rates),
                    "rates": rates,
                    "samples": statistics.median(r["samples"] for r in results),
                    "exact": all(r["exact"] for r in results),
                }
            out.append(row)
    return out


def print_writers(rows: list[dict[str, Any]], threads: str) -> None:
    libs = [k for k in rows[0] if k not in ("kind", "fill", "pace", "processes")]
    print(
        "transitions into one shared buffer by spawned writers while the parent waits (idle) "
        "or samples batches of 256 (flat out, or at a learner's pace in batches/s): median "
        "transitions/s over the rounds, [range], parent's batches, 4 / 1 writers; "
        f"torch threads per process: {threads}"
    )
    print(
        f"{'rows':<6} {'fill':<8} {'parent':<9} writers  " + "  ".join(f"{lib:<44}" for lib in libs)
    )
    first: dict[tuple[str, str, float, str], float] = {}
    for row in rows:
        cells = []
        for lib in libs:
            r = row[lib]
            if "error" in r:
                cells.append(f"failed ({r['error'][:30]})")
                continue
            ok = "" if r["exact"] else " (count off)"
            spread = f"[{min(r['rates']) / 1e3:.0f}k-{max(r['rates']) / 1e3:.0f}k]"
            ratio, key = "", (row["kind"], row["fill"], row["pace"], lib)
            if row["processes"] == 1:
                first[key] = r["rate"]
            elif key in first:
                ratio = f" x{r['rate'] / first[key]:.2f}"
            cells.append(f"{r['rate'] / 1e3:6.0f}k/s {spread:<13} {r['samples']:6.0f}{ratio}{ok}")
        pace = row["pace"]
        parent = "idle" if pace < 0 else f"{pace:.0f}/s" if pace else "flat out"
        print(
            f"{row['kind']:<6} {row['fill']:<8} {parent:<9} {row['processes']:<8} "
            + "  ".join(f"{c:<44}" for c in cells)
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs-torchrl", action="store_true")
    parser.add_argument("--rows", default="extend,writers")
    parser.add_argument("--kinds", default="small,atari", help="the writers rows' row kinds")
    parser.add_argument(
        "--fills",
        default="first,wrapped",
        help="the writers rows' regimes: first (the buffer's first fill), wrapped (overwrites)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the writers rows")
    parser.add_argument(
        "--threads",
        default="1",
        help="torch's threads in each process of the writers rows: a count, or 'default' (torch's)",
    )
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        what, *rest = args.child
        if what == "extend":
            lib, kind, capacity = rest
            print(json.dumps(child_extend(lib, kind, int(capacity))))
        else:
            lib, kind, processes, pace, fill = rest
            wrapped = fill == "wrapped"
            if lib == "limit":
                result = child_limit_writers(kind, int(processes), float(pace), wrapped)
            else:
                result = child_writers(lib, kind, int(processes), float(pace), wrapped)
            print(json.dumps(result))
        return 0
    results: dict[str, Any] = {}
    rows = args.rows.split(",")
    if "extend" in rows:
        results["extend"] = table_extend(args.vs_torchrl)
        print_extend(results["extend"])
    if "writers" in rows:
        kinds = args.kinds.split(",")
        fills = args.fills.split(",")
        if not set(fills) <= {"first", "wrapped"}:
            parser.error(f"--fills takes first and/or wrapped, comma-separated; got {args.fills!r}")
        results["writers"] = table_writers(args.vs_torchrl, kinds, fills, args.rounds, args.threads)
        print_writers(results["writers"], args.threads)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
