"""The ``ray`` rows: a Ray-backed buffer through its client, beside an empty call and in-process.

Each measure is wall-clock (the work spans processes), median of alternating
rounds. Ratios, with their targets:

- ``sample``: 256 transitions (obs float32[64]) through the client with
  ``prefetch=4``, as a multiple of one empty actor call (target <= 1.3) and
  beside in-process sampling;
- ``pixels``: 256 pixel transitions (2x uint8[4,84,84]) with ``prefetch=4``,
  throughput as a share of in-process sampling (target >= 0.5);
- ``extend``: 1,000-transition batches, beside in-process;
- ``2 consumers``: two processes sampling together, throughput as a multiple of
  one alone (target >= 1.5).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from _common import fill, pixel_transitions, transitions

RayRow = tuple[str, str, float, float, str]  # name, unit, value, ratio, what the ratio is

_OPTIONS = {"remote_config": {"num_cpus": 0}}


def _per_call(fn: Callable[[], object], seconds: float = 1.0, repeats: int = 5) -> float:
    """Median wall seconds per call of ``fn``."""
    for _ in range(20):
        fn()
    rounds = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / repeats:
            fn()
            n += 1
        rounds.append((time.perf_counter() - start) / n)
    return statistics.median(rounds)


def _pair(a: Callable[[], object], b: Callable[[], object]) -> tuple[float, float]:
    """Seconds per call of ``a`` and ``b``, measured in alternating rounds."""
    ta, tb = [], []
    for _ in range(3):
        ta.append(_per_call(a, 0.6, 3))
        tb.append(_per_call(b, 0.6, 3))
    return statistics.median(ta), statistics.median(tb)


def _remote(lib: Any, capacity: int, batch: int) -> Any:
    return lib.ReplayBuffer(
        storage=lib.LazyTensorStorage(capacity),
        batch_size=batch,
        prefetch=4,
        service_backend="ray",
        service_backend_options=_OPTIONS,
    )


def _consume(client: Any, seconds: float) -> int:
    """Sample through ``client`` for ``seconds`` (after a warm-up); return the batches."""
    for _ in range(20):
        client.sample()
    n, stop = 0, time.perf_counter() + seconds
    while time.perf_counter() < stop:
        client.sample()
        n += 1
    return n


def bench_ray() -> list[RayRow]:
    """Run the ``ray`` rows (starts and stops a local 2-CPU Ray cluster)."""
    import ray

    import rbdata as lib

    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows: list[RayRow] = []
    try:
        empty = ray.remote(num_cpus=0)(_Empty).remote()
        ray.get(empty.ping.remote())

        cap = 100_000
        rb = _remote(lib, cap, 256)
        fill(rb, cap, transitions, chunk=10_000)
        local = lib.ReplayBuffer(storage=lib.LazyTensorStorage(cap))
        fill(local, cap, transitions)
        client = rb.client()
        t_client, t_empty = _pair(client.sample, lambda: ray.get(empty.ping.remote()))
        t_local = _per_call(lambda: local.sample(256))
        rows.append(
            (
                "sample",
                "items/s",
                256 / t_client,
                t_client / t_empty,
                "x an empty actor call (<= 1.3)",
            )
        )
        rows.append(("sample", "items/s", 256 / t_client, t_local / t_client, "x in-process"))

        def two_consumers() -> tuple[float, float]:
            task = ray.remote(num_cpus=0)(_consume)
            ray.get(task.remote(rb.client(), 0.2))  # the worker processes start
            ray.get([task.remote(rb.client(), 0.2) for _ in range(2)])
            one = ray.get(task.remote(rb.client(), 3.0)) / 3.0
            both = sum(ray.get([task.remote(rb.client(), 3.0) for _ in range(2)])) / 3.0
            return one, both

        one, both = two_consumers()
        rows.append(("2 consumers", "items/s", 256 * both, both / one, "x one consumer (>= 1.5)"))

        data = transitions(1000)
        local_extend = lib.ReplayBuffer(storage=lib.LazyTensorStorage(cap))
        t_remote, t_local = _pair(lambda: rb.extend(data), lambda: local_extend.extend(data))
        rows.append(("extend", "items/s", 1000 / t_remote, t_local / t_remote, "x in-process"))
        rb.shutdown()
        del client

        cap = 5_000
        pixels = _remote(lib, cap, 256)
        fill(pixels, cap, pixel_transitions, chunk=500)
        local = lib.ReplayBuffer(storage=lib.LazyTensorStorage(cap))
        fill(local, cap, pixel_transitions)
        client = pixels.client()
        t_client, t_local = _pair(client.sample, lambda: local.sample(256))
        rows.append(
            (
                "pixels",
                "items/s",
                256 / t_client,
                t_local / t_client,
                "x in-process throughput (>= 0.5)",
            )
        )
        pixels.shutdown()
    finally:
        ray.shutdown()
    return rows


class _Empty:
    """An actor whose one method does nothing: the cost of a Ray round trip."""

    def ping(self) -> None:
        return None


def bench_ray_shards() -> list[tuple[str, int, float, str]]:
    """The 1 vs 2 vs 4 shard rows (per-call costs and sharded extend/sample; bench_shards.py)."""
    from bench_shards import shard_rows

    return shard_rows()
