"""Run inside a private /dev/shm (tests/service/test_ray_leftovers.py): a Ray-backed buffer's life.

``clean``: a Ray-backed buffer whose same-node clients (the driver and a
task) mapped it, then ``rb.shutdown()`` and ``ray.shutdown()``. ``killed``:
the same, with the task SIGKILLed while it extends through its map (Ray
retries it). The parent lists ``/dev/shm`` once this process has exited.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

import ray
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, TensorDictReplayBuffer


def rows(first: int, n: int) -> TensorDict:
    ids = torch.arange(first, first + n)
    return TensorDict({"id": ids, "obs": ids.float().unsqueeze(-1).expand(n, 16).clone()}, [n])


@ray.remote(num_cpus=0, max_retries=2)
def collect(client: Any, marker: str | None) -> int:
    from rbdata.sharing import faults

    if marker is not None and not os.path.exists(marker):  # the first try dies mid-extend
        open(marker, "w").close()  # noqa: SIM115 - an empty marker
        faults.arm("mid-copy", 3)
    try:
        for i in range(10):
            client.extend(rows(1000 + 10 * i, 10))
            time.sleep(0.06)  # past the client's retry interval: later writes go through its map
    finally:
        faults.arm(None)
    return 100


def main(scenario: str) -> None:
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=80 * 1024 * 1024,
    )
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000),
        batch_size=8,
        service_backend="ray",
        service_backend_options={"remote_config": {"num_cpus": 0}},
    )
    rb.extend(rows(0, 10))
    time.sleep(0.06)
    rb.extend(rows(10, 10))  # through the driver's map
    with tempfile.TemporaryDirectory() as scratch:
        marker = os.path.join(scratch, "tried") if scenario == "killed" else None
        assert ray.get(collect.remote(rb.client(), marker), timeout=60) == 100
    batch = rb.sample()
    assert torch.equal(batch["obs"][:, 3], batch["id"].float())
    print("rows", len(rb))
    rb.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
