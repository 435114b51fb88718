"""The ServableBuffer conformance checks: run on every buffer kind the loader serves.

Each buffer kind's test module calls :func:`check_servable` with a factory of an
empty buffer that holds TensorDicts of ``{"obs": float32[2]}`` (plus, where the
buffer needs them, its own entries) and ``batch_size=4``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rbdata.buffers.protocol import Draw, ServableBuffer


def transitions(n: int, start: int = 0) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1).expand(n, 2)
    return TensorDict({"obs": obs.clone()}, batch_size=[n])


def check_servable(make: Callable[[], Any], tmp_path: Path) -> None:
    """Every ServableBuffer method behaves as the protocol documents, on a fresh buffer."""
    buffer = make()
    assert isinstance(buffer, ServableBuffer)
    assert buffer.batch_size == 4
    _check_writes_and_waits(buffer)
    _check_draw_and_gather(buffer)
    _check_sampling_state(buffer)
    _check_stats_sources(buffer)
    _check_priorities_and_versions(buffer)
    _check_dumps(buffer, make, tmp_path)


def _check_writes_and_waits(buffer: Any) -> None:
    before = buffer.write_count
    woke = threading.Event()

    def waiter() -> None:
        if buffer.wait_for_data(lambda: buffer.write_count > before, timeout=10.0):
            woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    buffer.extend(transitions(16))
    thread.join(10.0)
    assert woke.is_set(), "wait_for_data was not woken by a write"
    assert buffer.write_count == before + 16 and len(buffer) >= 16
    buffer.notify_waiters()  # wakes nobody, raises nothing
    assert buffer.wait_for_data(lambda: False, timeout=0.01) is False


def _check_draw_and_gather(buffer: Any) -> None:
    with buffer.lock:  # a reentrant lock the loader takes around draws
        draw = buffer.draw(4)
    assert isinstance(draw, Draw) and draw.rows == 4
    assert torch.equal(draw.info["index"], draw.index)
    assert all(isinstance(v, torch.Tensor) for v in draw.info.values())
    batch = buffer.gather(draw)
    assert batch.batch_size == torch.Size([4]) and torch.equal(batch["index"], draw.index)
    assert buffer.refilter(batch) is not None
    assert batch["obs"].shape == (4, 2)


def _check_sampling_state(buffer: Any) -> None:
    buffer.set_rng(torch.Generator().manual_seed(0))
    state = buffer.sampling_state()
    first = buffer.draw(4).index
    buffer.load_sampling_state(state)
    assert torch.equal(buffer.draw(4).index, first), "a loaded sampling state replays the draws"


def _check_stats_sources(buffer: Any) -> None:
    handle = buffer.register_stats_source(lambda: {"conformance_counter": 7})
    stats = buffer.stats()
    assert stats["conformance_counter"] == 7 and stats["write_count"] == buffer.write_count
    handle.remove()
    assert "conformance_counter" not in buffer.stats()


def _check_priorities_and_versions(buffer: Any) -> None:
    batch = buffer.gather(buffer.draw(4))
    buffer.update_batch_priority(batch, torch.full((4,), 3.0))  # ignored unless prioritized
    assert isinstance(buffer.prioritized, bool)
    buffer.publish_policy_version(5)


def _check_dumps(buffer: Any, make: Callable[[], Any], tmp_path: Path) -> None:
    path = tmp_path / "conformance-dump"
    buffer.dumps(path)
    other = make()
    other.loads(path)
    assert len(other) == len(buffer) and other.write_count == buffer.write_count
