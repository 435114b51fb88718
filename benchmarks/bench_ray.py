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
import sys
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
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        # the task rows' workers stay (Ray stops idle workers above num_cpus after 1 s;
        # a fresh one, importing torch, starts seconds into the others' window)
        _system_config={"idle_worker_killing_time_threshold_ms": 600_000},
    )
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


# ------------------------------------------------------------------ side by side
# python benchmarks/bench_ray.py [--seconds S] [--rounds R]: torchrl 0.14.1's RayReplayBuffer
# (run in torchrl's venv, RBDATA_TORCHRL_VENV) and rbdata's Ray-backed buffer on issue 19's
# workload, in alternating rounds of one run; prints a markdown table of medians and ranges.
_CAPACITY = 100_000
_BATCH = 256
_EXTEND = 1_000
_PACE = 25_000  # transitions/s of each paced collector
SIDE_ROWS = (
    ("extend", "driver extend (1,000 per call)", "transitions/s"),
    ("extend_behind", "driver extend, client with write_behind=8", "transitions/s"),
    ("sample", "driver sample(256)", "batches/s"),
    ("tasks1", "1 client task sampling", "batches/s"),
    ("tasks2", "2 client tasks sampling (together)", "batches/s"),
    ("tasks4", "4 client tasks sampling (together)", "batches/s"),
    ("alone", "learner task alone", "batches/s"),
    ("fleet", "learner task, 4 collectors at 25k/s each", "batches/s"),
)


def issue_transitions(n: int, start: int = 0) -> Any:
    """The issue's transitions: obs and next obs float32[64], action, reward, done."""
    from tensordict import TensorDict

    obs = torch.randn(n, 64)
    return TensorDict(
        {
            "obs": obs,
            "action": torch.arange(start, start + n),
            "reward": torch.randn(n),
            "done": torch.zeros(n, dtype=torch.bool),
            "next": {"obs": obs + 1},
        },
        batch_size=[n],
    )


def _build(lib: str) -> Any:
    if lib == "torchrl":
        from torchrl.data import LazyTensorStorage, RayReplayBuffer, TensorDictReplayBuffer

        return RayReplayBuffer(
            replay_buffer_cls=TensorDictReplayBuffer,
            storage=LazyTensorStorage(_CAPACITY),
            batch_size=_BATCH,
            remote_config={"num_cpus": 0},
        )
    import rbdata

    return rbdata.TensorDictReplayBuffer(
        storage=rbdata.LazyTensorStorage(_CAPACITY),
        batch_size=_BATCH,
        prefetch=4,
        service_backend="ray",
        service_backend_options=_OPTIONS,
    )


def _sample_for(client: Any, seconds: float) -> float:
    """Batches per second ``client`` samples for ``seconds`` (after a warm-up)."""
    n, start, stop = _sample_window(client, seconds, time.time())
    return n / (stop - start)


def _sample_window(client: Any, seconds: float, start_at: float) -> tuple[int, float, float]:
    """``(batches, start, stop)``: ``client`` sampling from ``start_at`` (a ``time.time()``).

    Tasks given one ``start_at`` sample over the same window, after their warm-up.
    """
    for _ in range(10):
        client.sample()
    time.sleep(max(0.0, start_at - time.time()))
    n, start = 0, time.time()
    while time.time() - start < seconds:
        client.sample()
        n += 1
    return n, start, time.time()


def _together(task: Any, clients: list[Any], seconds: float) -> float:
    """Batches per second of ``clients`` sampling at once, each in its own task.

    All batches over the span from the first window's start to the last one's
    end: tasks that did not overlap (a worker started late) count as slower,
    never as faster.
    """
    import ray

    start_at = time.time() + 1.0  # past every task's start and warm-up
    windows = ray.get([task.remote(c, seconds, start_at) for c in clients])
    span = max(w[2] for w in windows) - min(w[1] for w in windows)
    return sum(w[0] for w in windows) / span


def _collect_for(client: Any, seconds: float, pace: float, flush: bool) -> int:
    """Extend ``client`` with 1,000-transition batches at ``pace`` transitions/s for ``seconds``."""
    data = issue_transitions(_EXTEND)
    period, start, sent = _EXTEND / pace, time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        client.extend(data)
        sent += 1
        delay = start + sent * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    if flush:  # rbdata's writes kept in flight (torchrl's client forwards any name)
        client.flush()
    return sent * _EXTEND


def side_by_side_rows(lib: str, seconds: float, shards: tuple[int, ...] = ()) -> dict[str, float]:
    """One library's measures of the workload (a local 2-CPU Ray cluster, started here)."""
    import ray

    torch.set_num_threads(1)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        # the task rows' workers stay (Ray stops idle workers above num_cpus after 1 s;
        # a fresh one, importing torch, starts seconds into the others' window)
        _system_config={"idle_worker_killing_time_threshold_ms": 600_000},
    )
    out: dict[str, float] = {}
    try:
        rb = _build(lib)
        for i in range(0, _CAPACITY, 10_000):
            rb.extend(issue_transitions(10_000, i))
        data = issue_transitions(_EXTEND)
        out["extend"] = _EXTEND / _per_call(lambda: rb.extend(data), seconds)
        if lib == "rbdata":  # writes kept in flight (torchrl has no such mode)
            writer = rb.client(write_behind=8)
            out["extend_behind"] = _EXTEND / _per_call(lambda: writer.extend(data), seconds)
            writer.flush()
        out["sample"] = 1 / _per_call(rb.sample, seconds)
        sampler = ray.remote(num_cpus=0)(_sample_for)
        window = ray.remote(num_cpus=0)(_sample_window)
        collector = ray.remote(num_cpus=0)(_collect_for)
        # four workers start (each task runs long enough that none can run two)
        _together(window, [rb.client() for _ in range(4)], 0.5)
        for n in (1, 2, 4):
            out[f"tasks{n}"] = _together(window, [rb.client() for _ in range(n)], seconds)
        out["alone"] = ray.get(sampler.remote(rb.client(), seconds))
        writers = [rb.client(write_behind=4) if lib == "rbdata" else rb.client() for _ in range(4)]
        fleet = [collector.remote(w, seconds + 1.0, _PACE, lib == "rbdata") for w in writers]
        out["fleet"] = ray.get(sampler.remote(rb.client(), seconds))
        ray.get(fleet)
        rb.shutdown()
        out.update(_shard_rows(lib, seconds, shards))
    finally:
        ray.shutdown()
    return out


def _shard_rows(lib: str, seconds: float, shards: tuple[int, ...]) -> dict[str, float]:
    """Hook for the 1/2/4-shard rows (``service_backend_options={"shards": n}``, issue 19 B).

    A build that refuses the option (sharding not merged yet) gives no row.
    """
    if lib != "rbdata":
        return {}
    import ray

    import rbdata

    out: dict[str, float] = {}
    for n in shards:
        try:
            rb = rbdata.TensorDictReplayBuffer(
                storage=rbdata.LazyTensorStorage(_CAPACITY),
                batch_size=_BATCH,
                prefetch=4,
                service_backend="ray",
                service_backend_options={**_OPTIONS, "shards": n},
            )
        except TypeError:
            return out
        try:
            rb.extend(issue_transitions(10_000))
            sampler = ray.remote(num_cpus=0)(_sample_for)
            out[f"shards{n}"] = sum(ray.get([sampler.remote(rb.client(), seconds)] * 1))
        finally:
            rb.shutdown()
    return out


def _torchrl_side(seconds: float) -> dict[str, float]:
    """torchrl's rows, run in its own virtualenv ({} where it has no torchrl or Ray)."""
    import json
    import logging
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    venv = Path(os.environ.get("RBDATA_TORCHRL_VENV", root.parent / "bench-venvs" / "torchrl"))
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no rbdata there
    probe = [str(python), "-c", "import ray, torchrl"]
    if not python.exists() or subprocess.run(probe, capture_output=True, env=env).returncode:
        logging.getLogger(__name__).info(
            "no torchrl column: %s lacks torchrl or ray (pip install 'ray[default]' there)", venv
        )
        return {}
    cmd = [str(python), __file__, "--lib", "torchrl", "--seconds", str(seconds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"the torchrl side failed: {proc.stderr[-800:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _range(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{med:,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def side_by_side_table(rounds: list[tuple[dict[str, float], dict[str, float]]]) -> str:
    """The markdown table of the rounds: torchrl, rbdata (median, range) and the ratio."""
    lines = [
        "| row | unit | torchrl 0.14.1 `RayReplayBuffer` | rbdata `service_backend='ray'` "
        "| ratio |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, name, unit in SIDE_ROWS:
        theirs = [t[key] for t, _ in rounds if key in t]
        ours = [o[key] for _, o in rounds if key in o]
        if not ours:
            continue
        ratio = f"{statistics.median(ours) / statistics.median(theirs):.1f}x" if theirs else "-"
        lines.append(
            f"| {name} | {unit} | {_range(theirs) if theirs else '-'} | {_range(ours)} | {ratio} |"
        )
    ours_med = {k: statistics.median([o[k] for _, o in rounds]) for k in rounds[0][1]}
    lines.append(
        f"| 2 client tasks / one driver | | | {ours_med['tasks2'] / ours_med['sample']:.2f}x | |"
    )
    lines.append(
        f"| learner with 4 collectors / alone | | | "
        f"{ours_med['fleet'] / ours_med['alone']:.2f}x | |"
    )
    for n in (1, 2, 4):
        if f"shards{n}" in ours_med:
            lines.append(
                f"| {n} shard(s), 1 client task | batches/s | | {ours_med[f'shards{n}']:,.0f} | |"
            )
    return "\n".join(lines)


def main() -> None:
    """Run the side-by-side comparison (or, with ``--lib``, one library's side as JSON)."""
    import argparse
    import json
    import logging

    parser = argparse.ArgumentParser(description="torchrl's RayReplayBuffer beside rbdata's")
    parser.add_argument("--lib", choices=["rbdata", "torchrl"])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--shards", default="", help="e.g. 1,2,4 (needs sharding)")
    args = parser.parse_args()
    shards = tuple(int(n) for n in args.shards.split(",") if n)
    if args.lib:
        sys.stdout.write(json.dumps(side_by_side_rows(args.lib, args.seconds, shards)) + "\n")
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rounds = []
    for i in range(args.rounds):  # alternating: load drifts on a shared machine
        theirs = _torchrl_side(args.seconds)
        ours = side_by_side_rows("rbdata", args.seconds, shards if i == 0 else ())
        rounds.append((theirs, ours))
        logging.info("round %d: torchrl %s rbdata %s", i, theirs, ours)
    sys.stdout.write(side_by_side_table(rounds) + "\n")


def bench_ray_shards() -> list[tuple[str, int, float, str]]:
    """The 1 vs 2 vs 4 shard rows (per-call costs and sharded extend/sample; bench_shards.py)."""
    from bench_shards import shard_rows

    return shard_rows()


if __name__ == "__main__":
    main()
