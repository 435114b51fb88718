"""service_backend="ray": the buffer lives in a Ray actor; every public method works through it."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

import rbdata
from rbdata import (
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)
from rbdata.service import RayBufferClient, ServiceUnavailableError
from rbdata.service.surface import FORWARDED_METHODS, REFUSED_MEMBERS, UNSERVED_MEMBERS
from rbdata.sharing.slot_ring import SHM_DIR

OPTIONS = {"remote_config": {"num_cpus": 0}}  # actors reserve no CPU of the 2-CPU cluster

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")


def transitions(n: int, start: int = 0) -> TensorDict:
    return TensorDict(
        {
            "obs": torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1).expand(n, 3),
            "next": {"reward": torch.ones(n, 1)},
            "episode": torch.arange(start, start + n) // 3,
        },
        batch_size=[n],
    )


def ray_buffer(cls: type = TensorDictReplayBuffer, **kwargs: Any) -> Any:
    kwargs.setdefault("storage", LazyTensorStorage(1000))
    kwargs.setdefault("service_backend_options", OPTIONS)
    return cls(service_backend="ray", **kwargs)


def shm_files() -> set[str]:
    return {p.name for p in SHM_DIR.glob("rbdata-*")} if SHM_DIR.is_dir() else set()


@pytest.fixture(scope="module")
def shared_rb(ray_cluster: Any) -> Any:
    """A buffer the tests below empty and fill as they need (one actor for all of them)."""
    rb = ray_buffer(
        sampler=SamplerWithoutReplacement(),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    )
    yield rb
    rb.shutdown()


@pytest.fixture
def empty_rb(shared_rb: Any) -> Any:
    shared_rb.empty()
    return shared_rb


@pytest.fixture
def td_rb(empty_rb: Any) -> Any:
    empty_rb.extend(transitions(10))
    return empty_rb


# ---------------------------------------------------------------- construction
def test_the_buffer_keeps_its_class_and_reports_the_ray_backend(td_rb: Any) -> None:
    assert isinstance(td_rb, TensorDictReplayBuffer)
    assert td_rb.service_backend == "ray"
    assert td_rb.is_alive
    assert td_rb.start() is td_rb


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"use_ray_service": True, "service_backend": "direct"}, ValueError),
        ({"service_backend": "ray", "service_backend_options": {"num_cpus": 1}}, TypeError),
        ({"service_backend_options": {"remote_config": {}}}, ValueError),
    ],
)
def test_bad_backend_arguments_are_refused(kwargs: dict[str, Any], error: type) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(error):
            ReplayBuffer(storage=LazyTensorStorage(10), **kwargs)


def test_a_failing_constructor_raises_its_own_error_and_leaves_no_actor(ray_cluster: Any) -> None:
    before = len(ray.util.list_named_actors(all_namespaces=True))
    with pytest.raises(TypeError, match="builds its own PrioritizedSampler"):
        ray_buffer(TensorDictPrioritizedReplayBuffer, alpha=0.7, beta=0.5, sampler=lambda: None)
    assert len(ray.util.list_named_actors(all_namespaces=True)) == before


# ------------------------------------------------------------------ the methods
def test_writes_reads_counters_and_the_lifecycle_through_the_actor(ray_cluster: Any) -> None:
    with pytest.warns(FutureWarning, match="use_ray_service"):  # the deprecated spelling
        rb = ReplayBuffer(
            storage=ListStorage(100),
            batch_size=3,
            use_ray_service=True,
            service_backend_options=OPTIONS,
        )
    try:
        assert rb.service_backend == "ray"
        assert rb.add("a") == 0
        # strings only: a batch mixing strings and ints has no collation (random draws of it
        # fail or not by chance, in torchrl too)
        assert rb.extend(["b", "c", "d"]).tolist() == [1, 2, 3]
        assert len(rb) == 4 and rb.write_count == 4 and rb.batch_size == 3
        assert rb[1] == "b" and rb[3] == "d"
        assert len(rb.sample()) == 3
        stats = rb.stats()
        assert stats["size"] == 4 and stats["write_count"] == 4 and stats["capacity"] == 100
        rb.empty()
        assert len(rb) == 0 and rb.write_count == 0
        client = rb.client()
        client.add("x")
        # the actor dies: its clients raise a clear error, the buffer reports it
        ray.kill(ray.get_actor(client.address.actor_name, namespace="rbdata"))
        deadline = time.monotonic() + 30.0
        while rb.is_alive and time.monotonic() < deadline:  # ray.kill is asynchronous
            time.sleep(0.05)
        with pytest.raises(ServiceUnavailableError, match="no longer alive"):
            client.sample(1)
        assert not rb.is_alive
    finally:
        rb.shutdown()
    rb.shutdown(timeout=1.0)  # idempotent
    assert ray.is_initialized()  # the user started Ray: it keeps running
    with pytest.raises(ServiceUnavailableError, match="was shut down"):
        pickle.loads(pickle.dumps(client)).add("y")
    for call in (lambda: rb.extend(["y"]), lambda: rb.sample(1), lambda: len(rb)):
        with pytest.raises(ServiceUnavailableError, match="was shut down"):
            call()  # the buffer's own calls too: no new local Ray, no raw "Failed to submit"
    assert "shut down" in repr(rb)
    with pytest.raises(RuntimeError, match="cannot be restarted"):
        rb.start()
    with pytest.raises(RuntimeError, match="cannot be restarted"):
        rb.client()


def test_sample_with_info_indexing_and_setitem(td_rb: Any) -> None:
    batch, info = td_rb.sample(return_info=True)
    assert batch["obs"].shape == (4, 3) and batch["next", "reward"].shape == (4, 1)
    assert torch.equal(info["index"], batch["index"])
    assert "index_generation" in info
    row = td_rb[2]
    assert row["obs"].tolist() == [2.0, 2.0, 2.0]
    assert td_rb[torch.tensor([0, 9])]["obs"][:, 0].tolist() == [0.0, 9.0]


def test_update_if_present_skips_rewritten_slots(empty_rb: Any) -> None:
    empty_rb.extend(transitions(1000))
    batch = empty_rb.sample(8)
    empty_rb.extend(transitions(2, start=5000))  # the buffer is full: slots 0 and 1 are rewritten
    rewritten = int((batch["index"] < 2).sum())
    result = empty_rb.update_if_present(
        index=batch["index"],
        generation=batch["index_generation"],
        patch={"obs": torch.full((8, 3), -1.0)},
    )
    assert result.stale_count == rewritten and result.updated_count == 8 - rewritten
    live = batch["index"][batch["index"] >= 2]
    assert (empty_rb[live]["obs"] == -1).all()


def test_priorities_update_through_the_actor(ray_cluster: Any) -> None:
    rb = ray_buffer(
        TensorDictPrioritizedReplayBuffer, alpha=1.0, beta=0.5, storage=LazyTensorStorage(8)
    )
    try:
        rb.extend(transitions(8))
        rb.update_priority(torch.arange(8), torch.tensor([0.0] * 7 + [1.0]))
        assert set(rb.sample(16)["index"].tolist()) == {7}
        batch = rb.sample(4).set("td_error", torch.ones(4))
        batch["index"] = torch.tensor([1, 1, 1, 1])
        rb.update_tensordict_priority(batch)
        assert set(rb.sample(32)["index"].tolist()) <= {1, 7}
        assert rb.prioritized
    finally:
        rb.shutdown()


def test_set_update_and_query_run_in_the_actor(empty_rb: Any) -> None:
    rb = empty_rb
    rb.extend(transitions(6))  # episodes 0 and 1, of 3 steps each
    assert rb.set_at_("obs", torch.zeros(2, 3), torch.tensor([0, 1])) is rb
    assert rb[0]["obs"].sum() == 0
    trajectories = rb.query(rbdata.traj.length >= 3, trajectory_key="episode")
    assert len(trajectories) == 2
    assert rb.read_all_in_order()["obs"].shape == (6, 3)


def test_state_dict_dumps_and_loads_round_trip(empty_rb: Any, tmp_path: Path) -> None:
    rb = empty_rb
    rb.extend(transitions(10))
    state = rb.state_dict()
    rb.dumps(tmp_path / "dump")
    rb.empty()
    rb.load_state_dict(state)
    assert len(rb) == 10 and rb[:]["obs"][:, 0].tolist() == [float(i) for i in range(10)]
    rb.empty()
    rb.loads(tmp_path / "dump")
    assert len(rb) == 10 and rb.write_count == 10


def test_iteration_with_next_ends_a_pass_with_none(empty_rb: Any) -> None:
    rb = empty_rb
    rb.extend(transitions(8))
    first, second = rb.next(), rb.next()
    assert rb.next() is None
    seen = torch.cat([first["obs"][:, 0], second["obs"][:, 0]]).sort().values
    assert seen.tolist() == [float(i) for i in range(8)]
    assert len(list(rb)) == 2  # __iter__ runs one pass


def test_actor_exceptions_keep_their_type_and_message(td_rb: Any) -> None:
    with pytest.raises(ValueError, match="batch_size must be"):
        td_rb.sample(batch_size=0)
    with pytest.raises(KeyError, match="'no_such_key' is not stored"):
        td_rb["no_such_key"]
    try:
        td_rb.extend(TensorDict({"obs": torch.zeros(2, 5)}, [2]))
        raise AssertionError("a mismatching extend must raise")
    except Exception as err:  # noqa: BLE001 - compared with the in-process error below
        remote = err
    local = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
    local.extend(transitions(1))
    with pytest.raises(type(remote)) as direct:
        local.extend(TensorDict({"obs": torch.zeros(2, 5)}, [2]))
    assert str(direct.value) == str(remote)


# ------------------------------------------------------------------- lifecycle
def test_the_client_has_no_lifecycle_methods(td_rb: Any) -> None:
    client = td_rb.client()
    for name in ("start", "shutdown", "close", "client"):
        assert not hasattr(client, name)


def test_the_buffer_forwards_the_surface_and_refuses_what_it_cannot_serve(td_rb: Any) -> None:
    for name in FORWARDED_METHODS:
        assert name in vars(type(td_rb)), name  # the Ray-backed class's member, from the surface
    assert not set(FORWARDED_METHODS) & set(vars(td_rb))  # one dispatch: nothing per instance
    assert type(td_rb).dump.__doc__ == RayBufferClient.dump.__doc__
    for name in REFUSED_MEMBERS:
        with pytest.raises(NotImplementedError, match=rf"{name}\(\) is not available on a Ray"):
            getattr(td_rb, name)()
    # never the driver's own, empty components (prioritized_sampler: prioritized buffers only)
    for name in (n for n in UNSERVED_MEMBERS if hasattr(type(td_rb).__mro__[1], n)):
        with pytest.raises(NotImplementedError, match=rf"rb\.{name} is not available on a Ray"):
            getattr(td_rb, name)
    assert len(td_rb) == 10 and td_rb.stats()["size"] == 10  # a refused call changes nothing


def test_as_remote_builds_a_ray_class_of_the_buffer(ray_cluster: Any) -> None:
    remote_cls = TensorDictReplayBuffer.as_remote({"num_cpus": 0})
    actor = remote_cls.remote(storage=LazyTensorStorage(10))
    ray.get(actor.extend.remote(transitions(3)))
    assert ray.get(actor.__len__.remote()) == 3
    ray.kill(actor)


# ---------------------------------------------------------------- other processes
def test_items_extended_from_two_ray_tasks_all_arrive(empty_rb: Any) -> None:
    def extend_from_task(client: Any, start: int) -> int:
        import torch
        from tensordict import TensorDict

        for i in range(10):
            obs = torch.arange(start + 5 * i, start + 5 * i + 5.0).unsqueeze(-1).expand(5, 3)
            reward, episode = torch.ones(5, 1), torch.zeros(5, dtype=torch.long)
            client.extend(
                TensorDict({"obs": obs, "next": {"reward": reward}, "episode": episode}, [5])
            )
        return len(client)

    task = ray.remote(num_cpus=0)(extend_from_task)
    client = empty_rb.client()
    ray.get([task.remote(client, 0), task.remote(client, 1000)])
    assert len(empty_rb) == 100 and empty_rb.write_count == 100
    values = set(empty_rb[:]["obs"][:, 0].tolist())
    assert values == {float(i) for i in range(50)} | {float(1000 + i) for i in range(50)}


def test_a_second_driver_process_uses_a_pickled_client(td_rb: Any, tmp_path: Path) -> None:
    path = tmp_path / "client.pkl"
    path.write_bytes(pickle.dumps(td_rb.client()))
    before = td_rb.write_count
    script = (
        "import pickle, sys, torch\n"
        "from tensordict import TensorDict\n"
        "client = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "client.extend(TensorDict({'obs': torch.zeros(3, 3), 'next': {'reward': torch.ones(3, 1)},"
        " 'episode': torch.zeros(3, dtype=torch.long)}, [3]))\n"
        "print(len(client), client.sample(2)['obs'].shape[0])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(rbdata.__file__).parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == [str(before + 3), "2"]
    assert td_rb.write_count == before + 3


# ---------------------------------------------------------------- speed paths
def test_shared_memory_slots_requests_in_flight_and_no_leftovers(ray_cluster: Any) -> None:
    before = shm_files()
    rb = ray_buffer(
        ReplayBuffer,
        storage=LazyTensorStorage(500),
        batch_size=64,
        prefetch=3,
        service_backend_options={**OPTIONS, "same_node_maps": False},  # the actor's slots
    )
    try:
        pixels = torch.randint(0, 255, (500, 4, 32, 32), dtype=torch.uint8)
        rb.extend(TensorDict({"pixels": pixels}, [500]))
        client = rb.client(prefetch=0)
        first, info = client.sample(return_info=True)  # the object store; slots come after it
        assert torch.equal(first["pixels"], pixels[info["index"]])
        ring = client._ring
        assert ring is not None and ring.slots == 4
        held = [client.sample(return_info=True) for _ in range(3)]
        assert ring.in_use() == 3
        for batch, info in held:
            assert torch.equal(batch["pixels"], pixels[info["index"]])
        del held, batch, info
        gc.collect()
        assert ring.in_use() == 0
        held = [client.sample() for _ in range(6)]  # more than the ring holds: the store path
        assert ring.in_use() == 4 and len({b["pixels"].data_ptr() for b in held}) == 6
        assert not shm_files() - before  # ring files are unlinked once both sides map them
        del held
        ahead = rb.client()  # the buffer's prefetch=3: batches come in groups of 3
        assert ahead.sample()["pixels"].shape == (64, 4, 32, 32)
        assert len(ahead._samples.replies) == 2 and len(ahead._samples.inflight) == 1
        with pytest.raises(ValueError, match="fixed at construction"):
            ahead.sample(3)
    finally:
        rb.shutdown()
    assert not shm_files() - before
