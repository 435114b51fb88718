"""Storages cost what they hold: capacity is reserved, pages are committed as rows are written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata.sharing.segments import HUGE_PAGE_MIN, reserve, reserve_shared
from rbdata.storages import CompressedListStorage
from rbdata.storages._pages import resident_bytes

FRAME = (4, 84, 84)  # an Atari frame stack: 28,224 bytes a row


def machine_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def run_isolated(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (its own RSS) and return the JSON it prints last."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _strict_overcommit() -> bool:
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            return f.read().strip() == "2"
    except OSError:
        return False


@pytest.mark.skipif(
    _strict_overcommit(), reason="vm.overcommit_memory=2 refuses any reservation past RAM+swap"
)
def test_a_capacity_ten_times_the_memory_accepts_writes_and_rss_follows_the_rows():
    row = 28_232  # FRAME plus one float, packed (aligned to 8 bytes)
    capacity = 10 * machine_memory() // row + 1
    out = run_isolated(
        f"""
        import json, torch
        from tensordict import TensorDict
        from rbdata import LazyTensorStorage, TensorDictReplayBuffer

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096

        rb = TensorDictReplayBuffer(storage=LazyTensorStorage({capacity}), batch_size=32)
        chunk = TensorDict({{
            "pixels": torch.randint(0, 256, (2000, *{FRAME}), dtype=torch.uint8),
            "reward": torch.ones(2000, 1),
        }}, [2000])
        base, points = rss(), []
        for step in range(10):
            rb.extend(chunk)
            points.append([len(rb), rss() - base, rb.stats()["resident_bytes"]])
        sample = rb.sample()
        far = rb.storage.get_leaf("pixels")[{capacity} - 1]  # never written: zeros, not committed
        print(json.dumps({{
            "points": points,
            "capacity_bytes": rb.stats()["capacity_bytes"],
            "far_zero": bool((far == 0).all()),
            "sample_ok": bool((sample["reward"] == 1).all()) and sample["pixels"].shape[0] == 32,
            "rss_after_reads": rss() - base,
        }}))
        """
    )
    assert out["capacity_bytes"] == capacity * row > 10 * machine_memory()
    assert out["far_zero"] and out["sample_ok"]
    constant = 64 * 2**20
    for rows, grown, resident in out["points"]:
        expected = rows * row
        assert abs(grown - expected) <= 0.1 * expected + constant, (rows, grown, expected)
        assert abs(resident - expected) <= 4096 * 2, (rows, resident, expected)
    rows, grown, _ = out["points"][-1]
    assert out["rss_after_reads"] <= 1.1 * rows * row + constant


def test_first_extend_costs_the_same_at_any_capacity():
    out = run_isolated(
        f"""
        import json, time, torch
        from tensordict import TensorDict
        from rbdata import LazyTensorStorage, TensorDictReplayBuffer

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096

        data = TensorDict({{"pixels": torch.ones(1000, *{FRAME}, dtype=torch.uint8)}}, [1000])
        res = {{}}
        for capacity in (1_000, 1_000_000_000):
            rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity))
            base = rss()
            start = time.perf_counter()
            rb.extend(data)
            res[capacity] = [time.perf_counter() - start, rss() - base]
            del rb
        print(json.dumps(res))
        """
    )
    small_time, small_rss = out["1000"]
    big_time, big_rss = out["1000000000"]
    data_bytes = 1000 * 28_224
    assert abs(big_rss - data_bytes) <= 0.1 * data_bytes + 32 * 2**20
    assert big_time < 1.0  # zero-filling 28 TB would take hours; reserving it takes microseconds
    assert abs(small_rss - data_bytes) <= 0.1 * data_bytes + 32 * 2**20
    assert small_time < 1.0


def test_reserved_memory_reads_zeros_and_commits_what_is_written():
    region = reserve(HUGE_PAGE_MIN - 4096)  # below the huge-page size: 4 KiB pages
    assert resident_bytes(region, region.numel()) == 0
    region[: 10 * 4096].fill_(7)
    assert resident_bytes(region, region.numel()) == 10 * 4096
    # reading unwritten memory maps the shared zero page: zeros, no memory of its own
    assert int(region[-(2**20) :].sum()) == 0
    assert resident_bytes(region, 100) == 100
    big = reserve(2**30)  # huge pages where the kernel gives them: 2 MiB committed at most
    assert resident_bytes(big, big.numel()) == 0
    big[: 10 * 4096].fill_(7)
    assert 10 * 4096 <= resident_bytes(big, big.numel()) <= 2**21
    assert int(big[-(2**20) :].sum()) == 0
    shared = reserve_shared(2**30)
    # torch may touch the first page of a shared-memory file (its header)
    assert shared.is_shared() and resident_bytes(shared, shared.numel()) <= 4096
    shared[-1] = 3
    assert resident_bytes(shared, shared.numel()) <= 2 * 4096 and int(shared[-2]) == 0


def _huge_page_mode() -> str | None:
    """The kernel's transparent huge page mode (``always``, ``madvise``, ``never``), if known."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")]


def _huge_page_eligible(tensor: torch.Tensor) -> bool:
    """Whether the mapping holding ``tensor`` may get huge pages (``/proc/self/smaps``)."""
    address = tensor.data_ptr()
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low <= address < high
            elif inside and head == "THPeligible:":
                return line.split()[1] == "1"
    raise AssertionError("no mapping holds the tensor")


@pytest.mark.skipif(
    _huge_page_mode() not in ("always", "madvise"), reason="the kernel gives no huge pages"
)
def test_large_reservations_ask_for_huge_pages():
    """A sampled batch gathers rows all over a large buffer: 2 MiB pages spare the TLB."""
    big = reserve(HUGE_PAGE_MIN)
    assert _huge_page_eligible(big)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1_000_000))
    rb.extend(TensorDict({"obs": torch.ones(10, 64)}, [10]))
    assert _huge_page_eligible(rb.storage.get_leaf("obs"))
    if _huge_page_mode() == "madvise":  # small ones are left to the kernel's default
        assert not _huge_page_eligible(reserve(HUGE_PAGE_MIN // 2))


def test_unwritten_rows_read_zeros_as_before():
    storage = LazyTensorStorage(1000)
    storage.set(slice(0, 2), {"a": torch.full((2, 3), 5.0), "b": torch.ones(2, dtype=torch.int64)})
    assert torch.equal(storage.get_leaf("a")[2:], torch.zeros(998, 3))
    assert torch.equal(storage.get_leaf("b")[2:], torch.zeros(998, dtype=torch.int64))
    assert torch.equal(storage.get_leaf("a")[:2], torch.full((2, 3), 5.0))


def test_stats_report_capacity_and_resident_bytes():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100_000))
    assert "resident_bytes" not in rb.stats()
    rb.extend(TensorDict({"obs": torch.ones(1000, 1024, dtype=torch.uint8)}, [1000]))
    stats = rb.stats()
    assert stats["capacity_bytes"] == 100_000 * 1024
    assert stats["resident_bytes"] == 1000 * 1024  # 250 whole pages
    rb.extend(TensorDict({"obs": torch.ones(3, 1024, dtype=torch.uint8)}, [3]))
    assert rb.stats()["resident_bytes"] == 1003 * 1024


def test_memmap_and_compressed_and_list_storages_report_what_they_know(tmp_path):
    memmap = ReplayBuffer(storage=LazyMemmapStorage(10_000, scratch_dir=tmp_path))
    memmap.extend(torch.ones(100, 4096, dtype=torch.uint8))
    stats = memmap.stats()
    assert stats["capacity_bytes"] == 10_000 * 4096
    assert stats["resident_bytes"] == 100 * 4096  # the written pages are in the page cache
    compressed = ReplayBuffer(storage=CompressedListStorage(10_000))
    compressed.extend(torch.zeros(100, 4096, dtype=torch.uint8))
    resident = compressed.stats()["resident_bytes"]
    assert resident == compressed.storage.bytes() and 0 < resident < 100 * 4096
    assert len(compressed.storage._frames) == 100  # no slot list of the whole capacity
    listed = ReplayBuffer(storage=ListStorage(10))
    listed.extend([1, 2])
    assert "resident_bytes" not in listed.stats()


def _shared_memory_mib() -> int:
    """The machine's shared memory in use (``Shmem`` of ``/proc/meminfo``): what it commits."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


def test_share_memory_keeps_the_rows_sparse_and_the_content():
    storage = LazyTensorStorage(1_000_000)  # 4 GiB of rows
    data = torch.arange(300 * 1024, dtype=torch.float32).reshape(300, 1024)
    storage.set(slice(0, 300), data)
    before = _shared_memory_mib()
    storage.share_memory_()
    # torch's own shared allocation would commit the 4 GiB at once (fallocate)
    assert _shared_memory_mib() - before < 512
    packed = storage._rows.packed
    assert packed.is_shared()
    assert resident_bytes(packed, packed.numel()) <= 301 * 4096
    assert torch.equal(storage.get(torch.arange(300)), data)
    storage.set(slice(300, 301), data[:1])
    assert torch.equal(storage.get(torch.tensor([300])), data[:1])
    assert storage.memory_stats() == {
        "capacity_bytes": 1_000_000 * 4096,
        "resident_bytes": 301 * 4096,
    }


def test_shared_init_allocates_sparse_shared_rows():
    storage = LazyTensorStorage(1_000_000, shared_init=True)
    storage.set(slice(0, 10), torch.ones(10, 4096, dtype=torch.uint8))
    packed = storage._rows.packed
    assert packed.is_shared() and resident_bytes(packed, packed.numel()) <= 11 * 4096


def test_a_copy_costs_what_the_storage_holds():
    import copy
    import pickle

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100_000_000), batch_size=4)
    rb.extend(
        TensorDict({"pixels": torch.randint(0, 256, (100, *FRAME), dtype=torch.uint8)}, [100])
    )
    payload = pickle.dumps(rb)  # the capacity is 2.8 TB; the filled rows 2.8 MB
    assert len(payload) < 4 * 100 * 28_232
    for clone in (pickle.loads(payload), copy.deepcopy(rb)):
        assert torch.equal(clone[:]["pixels"], rb[:]["pixels"])
        assert clone.stats()["capacity_bytes"] == rb.stats()["capacity_bytes"]
        clone.extend(TensorDict({"pixels": torch.ones(2, *FRAME, dtype=torch.uint8)}, [2]))
        assert len(clone) == 102 and len(rb) == 100  # a copy counts on its own
