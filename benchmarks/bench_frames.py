"""Frame-deduplicated vs plain storage: resident memory of an Atari buffer, and sampling rate.

Usage::

    python benchmarks/bench_frames.py                          # 50k transitions each
    python benchmarks/bench_frames.py --dedup 1000000 --plain 100000

Each storage runs in a fresh interpreter: a ``ReplayBuffer`` over
``FrameDedupStorage(frame_stack=4)`` or ``LazyTensorStorage`` is filled with
Atari-like TED transitions (``pixels`` and ``("next", "pixels")``
uint8[4, 84, 84], stacks of random 84x84 frames, the first frame repeated at
each reset, episodes of 100 to 2,000 steps, ``action``, ``("next", "reward")``,
``done``/``terminated``/``truncated``) in extends of 1,000; the row gives the
fill time, the process's resident memory growth (``/proc/self/statm``, after
``malloc_trim`` hands freed scratch memory back; the untrimmed growth is in
the JSON), the bytes per transition, and 32-row ``sample()`` calls per second over 3 seconds.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
K, SIDE, CHUNK, BATCH = 4, 84, 1000, 32


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _episodes(total: int, seed: int = 0) -> Any:
    """Chunks of ``CHUNK`` transitions, cut from episodes of random lengths."""
    import torch
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(seed)
    pending: list[Any] = []
    held = made = 0
    while made < total:
        length = int(torch.randint(100, 2001, (1,), generator=g))
        frames = torch.randint(0, 256, (length + 1, SIDE, SIDE), dtype=torch.uint8, generator=g)
        padded = torch.cat([frames[:1].expand(K - 1, SIDE, SIDE), frames])
        stacks = padded.unfold(0, K, 1).permute(0, 3, 1, 2).contiguous()  # [length + 1, K, ...]
        end = torch.zeros(length, 1, dtype=torch.bool)
        end[-1] = True
        truncated = bool(torch.randint(0, 2, (1,), generator=g))
        nxt = {
            "pixels": stacks[1:],
            "reward": torch.randn(length, 1, generator=g),
            "done": end,
            "terminated": end & (not truncated),
            "truncated": end & truncated,
        }
        action = torch.randint(0, 6, (length,), generator=g)
        pending.append(TensorDict({"pixels": stacks[:-1], "action": action, "next": nxt}, [length]))
        held += length
        while held >= CHUNK and made < total:
            joined = torch.cat(pending)
            n = min(CHUNK, total - made)
            yield joined[:n]
            rest = joined[n:]
            pending, held, made = [rest], rest.shape[0], made + n


def child(kind: str, capacity: int) -> dict[str, Any]:
    """Fill one buffer of ``capacity`` transitions and sample from it."""
    import torch

    import rbdata

    torch.set_num_threads(1)
    if kind == "dedup":
        storage: Any = rbdata.FrameDedupStorage(capacity, keys=["pixels"], frame_stack=K)
    else:
        storage = rbdata.LazyTensorStorage(capacity)
    rb = rbdata.ReplayBuffer(storage=storage, batch_size=BATCH)
    base = _rss()
    writing = 0.0
    for chunk in _episodes(capacity):
        start = time.perf_counter()
        rb.extend(chunk)
        writing += time.perf_counter() - start
    raw = _rss() - base
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed scratch memory back to the system
    grown = _rss() - base
    rb.sample()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < 3.0:
        rb.sample()
        calls += 1
    rate = calls / (time.perf_counter() - start)
    side = storage.side_bytes() if kind == "dedup" else 0
    return {
        "kind": kind,
        "transitions": len(rb),
        "write_s": writing,
        "rss_bytes": grown,
        "rss_untrimmed_bytes": raw,
        "bytes_per_transition": grown / capacity,
        "side_bytes": side,
        "samples_per_s": rate,
    }


def _run(kind: str, capacity: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", kind, str(capacity)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if proc.returncode != 0:
        return {"kind": kind, "error": (proc.stderr.strip().splitlines() or ["died"])[-1][:80]}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['kind']:<6} failed: {row['error']}"
    return (
        f"{row['kind']:<6} {row['transitions']:>10,} {row['rss_bytes'] / 2**30:8.2f} GiB "
        f"{row['rss_untrimmed_bytes'] / 2**30:8.2f} GiB "
        f"{row['bytes_per_transition']:9,.0f} B {row['side_bytes'] / 2**20:8.1f} MiB "
        f"{row['write_s']:8.1f} s {row['samples_per_s']:9,.0f}/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dedup", type=int, default=50_000, help="FrameDedupStorage capacity")
    parser.add_argument("--plain", type=int, default=50_000, help="LazyTensorStorage capacity")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return
    rows = [_run("dedup", args.dedup), _run("plain", args.plain)]
    print("Atari TED transitions (pixels, ('next', 'pixels') uint8[4, 84, 84]), 32-row samples")
    print(
        f"{'kind':<6} {'stored':>10} {'RSS growth':>12} {'untrimmed':>12} {'per trans.':>11} "
        f"{'side':>12} "
        f"{'fill':>10} {'samples':>11}"
    )
    for row in rows:
        print(_line(row))
    ok = [r for r in rows if "error" not in r]
    if len(ok) == 2:
        print(f"sampling rate dedup/plain: {ok[0]['samples_per_s'] / ok[1]['samples_per_s']:.2f}x")


if __name__ == "__main__":
    main()
