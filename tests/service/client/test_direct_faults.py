"""A same-node Ray collector killed while it writes through its map stops nobody.

The collector, a Ray task, SIGKILLs itself at an instrumented point
(:mod:`rbdata.sharing.faults`) in a write through its map of the buffer the
actor hosts: holding the buffer's lock, or with half of a reserved batch
copied. The owner's ``len`` and ``sample``, a new client's ``extend`` and
Ray's retry of the task then each finish within :data:`BOUND_S` (the
contract's bound is milliseconds; the test's bound leaves room for a busy
machine), and every row is whole.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, TensorDictReplayBuffer

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

BOUND_S = 10.0
OPTIONS = {"remote_config": {"num_cpus": 0}}


def rows(first: int, n: int) -> TensorDict:
    """Rows whose every field derives from their id (``obs[:, k] == id * (k + 1)``)."""
    ids = torch.arange(first, first + n)
    obs = ids.unsqueeze(-1) * torch.arange(1, 9)
    return TensorDict({"id": ids, "obs": obs, "check": obs.sum(-1)}, [n])


def whole(batch: TensorDict) -> bool:
    ids = batch["id"]
    obs = ids.unsqueeze(-1) * torch.arange(1, 9)
    return bool((batch["obs"] == obs).all() and (batch["check"] == obs.sum(-1)).all())


def collector() -> Any:
    """A Ray task extending 8 batches of 10 through its client; the first try dies at a point.

    Defined here (pickled by value): the workers cannot import this test module.
    """

    @ray.remote(num_cpus=0, max_retries=2)
    def collect(client: Any, first: int, marker: str | None, point: str) -> float:
        import os
        import time

        import torch
        from tensordict import TensorDict

        from rbdata.sharing import faults

        if marker is not None and not os.path.exists(marker):
            open(marker, "w").close()  # noqa: SIM115 - an empty marker: the retry does not die
            faults.arm(point, 3)  # the 3rd pass: a write through the map
        longest = 0.0
        try:
            for i in range(8):
                ids = torch.arange(first + 10 * i, first + 10 * i + 10)
                obs = ids.unsqueeze(-1) * torch.arange(1, 9)
                data = TensorDict({"id": ids, "obs": obs, "check": obs.sum(-1)}, [10])
                start = time.monotonic()
                client.extend(data)
                longest = max(longest, time.monotonic() - start)
                time.sleep(0.06)  # past the client's retry interval: writes go through its map
        finally:
            faults.arm(None)
        return longest  # the longest extend

    return collect


def timed(call: Any) -> tuple[Any, float]:
    start = time.monotonic()
    out = call()
    return out, time.monotonic() - start


@pytest.mark.parametrize("point", ["took-lock", "mid-copy"])
def test_a_collector_killed_writing_through_its_map_stops_nobody(
    ray_cluster: Any, tmp_path: Path, point: str
) -> None:
    """Was: the owner's ``sample`` and ``len`` and a new client's ``extend`` blocked > 15 s."""
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(500),
        batch_size=32,
        service_backend="ray",
        service_backend_options=OPTIONS,
    )
    try:
        rb.extend(rows(1, 20))
        marker = str(tmp_path / "tried")
        start = time.monotonic()
        collect = collector()
        retried = collect.remote(rb.client(), 1000, marker, point)
        deadline = time.monotonic() + 60.0
        while not Path(marker).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # the first try is dead by now (its 3rd write through the map)
        n, took_len = timed(lambda: len(rb))
        batch, took_sample = timed(lambda: rb.sample())
        fresh = collect.remote(rb.client(), 5000, None, point)
        # a task's time includes starting a worker in place of the dead one (seconds here)
        longest_fresh = ray.get(fresh, timeout=60.0)
        longest_retry = ray.get(retried, timeout=60.0)
        print(  # the figures the reliability notes quote
            f"{point}: len {took_len:.3f} s, sample {took_sample:.3f} s, longest extend of "
            f"the new client {longest_fresh:.3f} s and of the retry {longest_retry:.3f} s; "
            f"retry done {time.monotonic() - start:.1f} s after the start"
        )
        assert took_len < BOUND_S and took_sample < BOUND_S
        assert longest_fresh < BOUND_S and longest_retry < BOUND_S
        assert whole(batch)
        assert n >= 20
        everything = rb[:]
        assert whole(everything)
        ids = set(everything["id"].tolist())
        assert set(range(5000, 5080)) <= ids  # the new client's writes
        assert set(range(1000, 1080)) <= ids  # the retry's writes
        assert len(rb) == rb.write_count == len(everything)
    finally:
        rb.shutdown()
