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
from rbdata.transforms import as_transform

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

    The first try writes its pid to ``marker``, then before each batch the
    batch's number to ``marker + ".at"``, and kills itself the 3rd time it
    passes ``point`` (a write through its map); Ray's retry writes ids from
    ``first + 2000``. Defined here (pickled by value): the workers cannot
    import this test module.
    """

    @ray.remote(num_cpus=0, max_retries=2)
    def collect(client: Any, first: int, marker: str | None, point: str) -> float:
        import os
        import time

        import torch
        from tensordict import TensorDict

        from rbdata.sharing import faults

        dying = marker is not None and not os.path.exists(marker)
        if dying:
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
            faults.arm(point, 3)
        elif marker is not None:
            first += 2000  # the retry
        longest = 0.0
        try:
            for i in range(8):
                if dying:
                    with open(f"{marker}.at", "w") as f:
                        f.write(str(i))
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


def wait_for_death(marker: Path) -> None:
    """Until the first try (its pid in ``marker``) is dead (bounded)."""
    deadline = time.monotonic() + 60.0
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    pid = int(marker.read_text())
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    return
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError("the first try of the collector did not die")


@pytest.mark.parametrize("point", ["took-lock", "mid-copy", "locked-mid-copy"])
def test_a_collector_killed_writing_through_its_map_stops_nobody(
    ray_cluster: Any, tmp_path: Path, point: str
) -> None:
    """Was: the owner's ``sample`` and ``len`` and a new client's ``extend`` blocked > 15 s.

    ``locked-mid-copy``: the buffer has a transform (its writes are made under
    the lock) and its ring has wrapped: the killed write overwrote committed
    rows (was: torn rows, and the dead write's rows, in ``rb[:]``).
    """
    locked = point.startswith("locked")
    extra: dict[str, Any] = {"transform": as_transform(torch.clone, invert=True)} if locked else {}
    capacity = 60 if locked else 500
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        batch_size=32,
        service_backend="ray",
        service_backend_options=OPTIONS,
        **extra,
    )
    try:
        rb.extend(rows(1, 70 if locked else 20))
        marker = tmp_path / "tried"
        start = time.monotonic()
        collect = collector()
        retried = collect.remote(rb.client(), 1000, str(marker), point)
        wait_for_death(marker)
        dead = int((tmp_path / "tried.at").read_text())
        dead_ids = set(range(1000 + 10 * dead, 1010 + 10 * dead))
        n, took_len = timed(lambda: len(rb))
        batch, took_sample = timed(lambda: rb.sample())
        after_kill = rb[:]
        assert whole(after_kill), "a torn row after the kill"
        assert not set(after_kill["id"].tolist()) & dead_ids, "the dead write's rows are seen"
        assert len(after_kill) == n == min(capacity, rb.write_count)
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
        everything = rb[:]
        assert whole(everything)
        ids = set(everything["id"].tolist())
        assert not ids & dead_ids
        assert len(rb) == len(everything) == min(capacity, rb.write_count)
        if not locked:  # everything fits: every acknowledged write is there
            assert set(range(5000, 5080)) <= ids  # the new client's writes
            assert set(range(3000, 3080)) <= ids  # the retry's writes
    finally:
        rb.shutdown()
