"""A client's map samples without the owner's lock and drops reads the epoch moved under.

Each scenario runs in one fresh process: :class:`DirectExport` exports a local
buffer and a :class:`DirectMap` maps it, as a client on the actor's node does
(no Ray). A fresh process because the export shares memory through torch's
``torch_shm_manager``, which a pytest process that ran Ray has lost.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch

from rbdata import LazyTensorStorage, ReplayBuffer
from rbdata.service.client.direct import DirectMap
from rbdata.service.server.direct import DirectExport


def _in_fresh_process(scenario: Callable[[], None]) -> None:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(scenario).result(timeout=120)  # re-raises the scenario's assertion


def _owner_and_map() -> tuple[ReplayBuffer, DirectExport, DirectMap, list[None]]:
    rb = ReplayBuffer(storage=LazyTensorStorage(64), batch_size=4)
    rb.extend(torch.arange(16))
    export, fetches = DirectExport(), []

    def fetch() -> tuple[bytes | None, bool]:
        fetches.append(None)
        return export.handle(rb, True)

    return rb, export, DirectMap(fetch), fetches


def _reads_leave_the_lock_alone() -> None:
    rb, _, direct, _ = _owner_and_map()
    assert direct.run("sample", (4,), {}, True)[0]
    version = rb.lock.shared.version
    before = int(version[0])
    for _ in range(5):
        done, batch = direct.run("sample", (4,), {}, True)
        assert done and bool(((batch >= 0) & (batch < 16)).all())
    assert int(version[0]) == before  # no hold of the owner's lock: two readers never queue
    done, index = direct.run("extend", (torch.arange(16, 20),), {})
    assert done and index.tolist() == [16, 17, 18, 19]
    assert int(version[0]) == before + 2  # one hold, for the write
    assert len(rb) == 20


def _stale_reads_are_made_again() -> None:
    rb, export, direct, fetches = _owner_and_map()
    stale, racing = direct.buffer(), []

    def sample_then_empty(*args: Any, **kwargs: Any) -> Any:
        racing.append(None)
        out = ReplayBuffer.sample(stale, *args, **kwargs)
        with rb.lock:  # what the owner does around a whole-buffer call
            export.invalidate("empty")
            rb.empty()
            rb.extend(torch.arange(100, 104))
        time.sleep(0.06)  # past the map's retry interval: it fetches the new map at once
        return out

    stale.sample = sample_then_empty
    done, batch = direct.run("sample", (8,), {}, True)
    assert done and len(racing) == 1 and len(fetches) == 2  # dropped, then read on the new map
    assert set(batch.tolist()) <= {100, 101, 102, 103}


def test_reads_leave_the_lock_alone_and_writes_take_it() -> None:
    _in_fresh_process(_reads_leave_the_lock_alone)


def test_a_read_the_epoch_moved_under_is_made_again_on_a_new_map() -> None:
    _in_fresh_process(_stale_reads_are_made_again)
