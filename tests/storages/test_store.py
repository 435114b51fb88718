"""StoreStorage against a real Redis: each module starts its own redis-server and stops it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rbdata import ReplayBuffer, SamplerWithoutReplacement, TensorDictReplayBuffer
from rbdata.storages import StoreStorage

pytest.importorskip("redis", reason="StoreStorage needs the 'store' extra (the redis client)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A redis-server of this module's own on a free loopback port (no disk persistence)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: run scripts/services.sh (apt-get)")
    import redis

    port = _free_port()
    workdir: Path = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10.0
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail(f"redis-server did not start on port {port}")
                time.sleep(0.05)
        client.close()
        yield port
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def _storage(port: int, max_size: int = 100) -> StoreStorage:
    return StoreStorage(max_size, host="127.0.0.1", port=port)


def test_tensordicts_round_trip_through_the_server(redis_port: int) -> None:
    rb = TensorDictReplayBuffer(storage=_storage(redis_port), batch_size=4)
    data = TensorDict({"obs": torch.arange(10.0), "nested": {"x": torch.ones(10, 2)}}, [10])
    assert rb.extend(data).tolist() == list(range(10))
    assert len(rb) == 10
    sample = rb.sample()
    assert sample["obs"].shape == (4,) and sample["nested", "x"].shape == (4, 2)
    assert torch.equal(sample["obs"], sample["index"].float())
    assert rb[3:5]["obs"].tolist() == [3.0, 4.0]


def test_plain_tensors_wrap_around_and_sample_without_replacement(redis_port: int) -> None:
    rb = ReplayBuffer(
        storage=_storage(redis_port, 5), sampler=SamplerWithoutReplacement(), batch_size=5
    )
    rb.extend(torch.arange(8))
    assert rb[:].tolist() == [5, 6, 7, 3, 4]
    assert sorted(rb.sample().tolist()) == [3, 4, 5, 6, 7]
    rb.add(torch.tensor(42))
    assert rb[:].tolist() == [5, 6, 7, 42, 4]


def test_state_dict_reconnects_to_the_same_rows(redis_port: int) -> None:
    rb = ReplayBuffer(storage=_storage(redis_port))
    rb.extend(TensorDict({"obs": torch.arange(6)}, [6]))
    other = ReplayBuffer(storage=_storage(redis_port))
    other.load_state_dict(rb.state_dict())
    assert len(other) == 6 and other[:]["obs"].tolist() == list(range(6))
    rb.storage.set(0, TensorDict({"obs": torch.tensor(60)}, []), set_cursor=False)
    assert other[0]["obs"].item() == 60  # one server, one set of rows


def test_a_write_of_another_kind_is_refused_and_changes_nothing(redis_port: int) -> None:
    rb = ReplayBuffer(storage=_storage(redis_port))
    rb.extend(torch.arange(3))
    with pytest.raises(TypeError, match="StoreStorage holds tensors"):
        rb.extend(TensorDict({"obs": torch.arange(2)}, [2]))
    with pytest.raises(TypeError, match="StoreStorage holds"):
        rb.extend(["a", "b"])
    assert len(rb) == 3 and rb.write_count == 3


def test_empty_forgets_the_items(redis_port: int) -> None:
    rb = ReplayBuffer(storage=_storage(redis_port))
    rb.extend(torch.arange(3))
    rb.empty()
    assert len(rb) == 0
    rb.extend(torch.tensor([7]))
    assert rb[:].tolist() == [7]


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="host"):
        StoreStorage(10, host=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="port"):
        StoreStorage(10, port=0)
    with pytest.raises(RuntimeError, match="non-initialized"):
        StoreStorage(10).get(0)
