"""Per-call costs of the Ray service and the 1 / 2 / 4 shard rows (the inputs of docs/scale.md).

Measured, wall-clock, on a local Ray cluster (actors with ``num_cpus=0``):

- ``empty call``: a plain actor method, blocking, and with 8 calls in flight;
- ``payload call``: the same with a 0.53 MB numpy argument (1,000 transitions);
- ``extend``: 1,000-transition extends of a :class:`ShardedReplayBuffer` with
  1, 2 and 4 shards, one writer per shard in flight (sticky routing);
- ``sample``: 256-transition samples of the same buffer (two rounds: masses,
  then the shards' draws).

``python benchmarks/bench_shards.py`` prints the rows; ``shard_rows()`` returns them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _common import transitions

ShardRow = tuple[str, int, float, str]  # what, shards, value, unit


def _rate(fn: Callable[[], int], seconds: float = 1.0, repeats: int = 3) -> float:
    """Median units per second of ``fn`` (which returns the units it did)."""
    fn()
    rounds = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / repeats:
            n += fn()
        rounds.append(n / (time.perf_counter() - start))
    return statistics.median(rounds)


class _Empty:
    def ping(self, payload: Any = None) -> None:
        return None


def shard_rows(shards: tuple[int, ...] = (1, 2, 4), seconds: float = 1.0) -> list[ShardRow]:
    """Measure the rows (starts and stops a local Ray cluster)."""
    import ray

    import rbdata as lib
    from rbdata.service.sharding.buffer import ShardedReplayBuffer
    from rbdata.service.transport.codec import encode

    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows: list[ShardRow] = []
    try:
        empty = ray.remote(num_cpus=0)(_Empty).remote()
        payload = np.zeros(1000 * 133, dtype=np.float32)  # 0.53 MB: 1,000 transitions
        rows.append(
            ("empty call", 1, _rate(lambda: (ray.get(empty.ping.remote()), 1)[1], seconds), "1/s")
        )
        rows.append(
            (
                "empty call, 8 in flight",
                1,
                _rate(lambda: len(ray.get([empty.ping.remote() for _ in range(8)])), seconds),
                "1/s",
            )
        )
        rows.append(
            (
                "payload call",
                1,
                _rate(lambda: (ray.get(empty.ping.remote(payload)), 1)[1], seconds),
                "1/s",
            )
        )
        rows.append(
            (
                "payload call, 8 in flight",
                1,
                _rate(
                    lambda: len(ray.get([empty.ping.remote(payload) for _ in range(8)])), seconds
                ),
                "1/s",
            )
        )
        data = transitions(1000)
        for count in shards:
            proto = lib.TensorDictPrioritizedReplayBuffer(
                alpha=0.6, beta=0.4, storage=lib.LazyTensorStorage(100_000 // count)
            )
            rb = ShardedReplayBuffer(proto, count, seed=0, remote_config={"num_cpus": 0})
            writers = [rb._shards[s] for s in range(count)]
            handles = [w._actor() for w in writers]
            args, kwargs = encode((data,)), encode({})

            def extend_all(
                handles: list[Any] = handles, args: Any = args, kwargs: Any = kwargs
            ) -> int:
                ray.get([h.call.remote("extend", args, kwargs) for h in handles])
                return 1000 * len(handles)

            rows.append(("extend", count, _rate(extend_all, seconds), "items/s"))
            rows.append(
                (
                    "sample(256)",
                    count,
                    _rate(lambda rb=rb: (rb.sample(256), 256)[1], seconds),
                    "items/s",
                )
            )
            rb.shutdown()
    finally:
        ray.shutdown()
    return rows


if __name__ == "__main__":
    for what, count, value, unit in shard_rows():
        print(f"{what:<28}{count:>3} shards {value:>12,.0f} {unit}")
