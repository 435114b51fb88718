"""Soak: a collector thread, a prefetching ReplayDataset and a priority-update thread at once.

Every row carries its id in every field (``id``, ``obs[16]``, ``("next", "id")``)
and lives in slot ``id % capacity`` at generation ``id // capacity + 1``, so a
batch whose fields disagree (a torn row), whose index or generation does not
match its id, or a final write count other than the rows extended is a
failure. Memory (RSS) is sampled after a warm-up and at the end.

Usage: python benchmarks/soak.py --seconds 60
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import threading
import time
from typing import Any

import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    ReplayDataset,
    TensorDictPrioritizedReplayBuffer,
    TensorDictRoundRobinWriter,
)

CAPACITY, CHUNK, BATCH, OBS = 4096, 32, 64, 16


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rows(start: int, n: int) -> TensorDict:
    ids = torch.arange(start, start + n)
    return TensorDict(
        {
            "id": ids,
            "obs": ids[:, None].float().expand(n, OBS).clone(),
            "next": {"id": ids.clone()},
        },
        [n],
    )


def _problems(batch: TensorDict) -> list[str]:
    """What is wrong with a sampled batch (empty when every row is whole and where it belongs)."""
    ids = batch["id"]
    out = []
    if not torch.equal(batch["obs"], ids[:, None].float().expand(-1, OBS)):
        out.append("torn row: obs differs from id")
    if not torch.equal(batch["next", "id"], ids):
        out.append("torn row: next.id differs from id")
    if not torch.equal(batch["index"], ids % CAPACITY):
        out.append("row in the wrong slot")
    if not torch.equal(batch["index_generation"], ids // CAPACITY + 1):
        out.append("generation does not match the row")
    return out


def run_soak(seconds: float) -> dict[str, Any]:
    """Run the three threads against one buffer for ``seconds``; counts and failures."""
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.6,
        beta=0.4,
        storage=LazyTensorStorage(CAPACITY),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=BATCH,
        generator=torch.Generator().manual_seed(0),
    )
    stop = threading.Event()
    failures: collections.Counter[str] = collections.Counter()
    counts = {"rows_extended": 0, "extends": 0, "batches": 0, "priority_updates": 0}
    sampled: queue.Queue[tuple[torch.Tensor, torch.Tensor]] = queue.Queue(maxsize=64)

    def guarded(body: Any) -> Any:
        def run() -> None:
            try:
                body()
            except BaseException as err:  # a thread's crash is a failure, not a hang
                failures[f"{threading.current_thread().name}: {err!r}"] += 1
                stop.set()

        return run

    @guarded
    def collect() -> None:
        while not stop.is_set():
            rb.extend(_rows(counts["rows_extended"], CHUNK))
            counts["rows_extended"] += CHUNK
            counts["extends"] += 1

    @guarded
    def update_priorities() -> None:
        gen = torch.Generator().manual_seed(1)
        while not stop.is_set() or not sampled.empty():
            try:
                index, generation = sampled.get(timeout=0.05)
            except queue.Empty:
                continue
            rb.update_priority(
                index, torch.rand(index.numel(), generator=gen) + 0.01, generation=generation
            )
            counts["priority_updates"] += 1

    rb.extend(_rows(0, CHUNK))
    counts["rows_extended"], counts["extends"] = CHUNK, 1
    threads = [
        threading.Thread(target=collect, name="collector"),
        threading.Thread(target=update_priorities, name="priority-updater"),
    ]
    for t in threads:
        t.start()
    rss_warm = None
    start = time.perf_counter()
    try:
        with ReplayDataset(rb, prefetch=2) as ds:
            for batch in ds:
                failures.update(_problems(batch))
                sampled.put((batch["index"].clone(), batch["index_generation"].clone()))
                counts["batches"] += 1
                elapsed = time.perf_counter() - start
                if rss_warm is None and elapsed > min(1.0, seconds / 4):
                    rss_warm = _rss_bytes()
                if elapsed > seconds or stop.is_set():
                    break
    finally:
        stop.set()
        for t in threads:
            t.join()
    wall = time.perf_counter() - start
    if rb.write_count != counts["rows_extended"]:
        failures[f"write_count {rb.write_count} != {counts['rows_extended']} rows extended"] += 1
    if len(rb) != min(counts["rows_extended"], CAPACITY):
        failures[f"len {len(rb)} != min(rows, capacity)"] += 1
    rss_end = _rss_bytes()
    return {
        **counts,
        "operations": counts["extends"] + counts["batches"] + counts["priority_updates"],
        "threads": 3,  # collector, dataset prefetch, priority updater (+ the consuming loop)
        "seconds": round(wall, 2),
        "rss_growth_mib": round((rss_end - (rss_warm or rss_end)) / 2**20, 1),
        "failures": dict(failures),  # what went wrong -> how many times
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to run")
    args = parser.parse_args()
    report = run_soak(args.seconds)
    print(json.dumps(report, indent=1))
    raise SystemExit(1 if report["failures"] else 0)


if __name__ == "__main__":
    main()
