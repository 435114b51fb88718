"""Shared-memory slot rings: a slot is free again when the last tensor viewing it dies."""

from __future__ import annotations

import gc

import pytest
import torch

from rbdata.sharing.slot_ring import SHM_DIR, SlotRing

pytestmark = pytest.mark.skipif(not SlotRing.available(), reason="no writable /dev/shm")


def test_slots_are_released_when_their_views_die_and_no_file_is_left() -> None:
    owner = SlotRing.create(slots=3, slot_bytes=128)
    client = SlotRing.attach(owner.path, 3, 128)
    owner.unlink()
    assert not owner.path.exists()
    taken = [owner.acquire() for _ in range(3)]
    assert sorted(taken) == [0, 1, 2] and owner.acquire() is None  # full: the caller falls back
    views = [client.view(slot) for slot in taken]
    for slot in taken:
        owner.memory(slot).fill_(slot + 1)
    seen = [int(v[0]) for v in views]
    assert seen == [slot + 1 for slot in taken]
    derived = views[1][10:20].view(torch.int16)  # a view of a view keeps the slot too
    del views
    gc.collect()
    assert owner.in_use() == 1
    del derived
    gc.collect()
    assert owner.in_use() == 0
    owner.close()
    client.close()


def test_a_ring_never_attached_is_unlinked_on_close() -> None:
    ring = SlotRing.create(slots=1, slot_bytes=64)
    assert ring.path.parent == SHM_DIR and ring.path.exists()
    ring.close()
    assert not ring.path.exists()


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="slots and slot_bytes"):
        SlotRing.create(slots=0, slot_bytes=64)


def test_threads_acquiring_at_once_never_share_a_slot() -> None:
    import threading

    ring = SlotRing.create(slots=64, slot_bytes=8)
    start = threading.Barrier(8)
    taken: list[int | None] = []

    def take() -> None:
        start.wait()
        got = [ring.acquire() for _ in range(8)]
        taken.extend(got)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(s for s in taken if s is not None) == list(range(64))  # each slot once
    assert ring.in_use() == 64 and ring.acquire() is None
    ring.close()
