"""A shared buffer mapped by an unrelated process (rbdata.buffers.shared_handle)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
)
from rbdata.sharing.cleanup import sweep
from rbdata.sharing.handle import import_shared


def rows(n: int, start: int = 0) -> TensorDict:
    ids = torch.arange(start, start + n)
    return TensorDict({"id": ids, "obs": ids.float().unsqueeze(-1).expand(n, 8)}, [n])


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: ReplayBuffer(storage=LazyTensorStorage(8)), "holds nothing yet"),
        (
            lambda: PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(8)),
            "prioritized sampler",
        ),
        (
            lambda: ReplayBuffer(storage=LazyTensorStorage(8), consume_after_n_samples=1),
            "consume_after_n_samples",
        ),
        (lambda: ReplayBuffer(storage=LazyTensorStorage(8), prefetch=2), "prefetch"),
        (
            lambda: TensorDictReplayBuffer(
                storage=LazyTensorStorage(8), writer=TensorDictMaxValueWriter(rank_key="id")
            ),
            "ring order",
        ),
    ],
)
def test_buffers_other_processes_cannot_follow_are_not_exported(make, reason) -> None:  # type: ignore[no-untyped-def]
    rb = make()
    if "nothing" not in reason:
        rb.extend(rows(4) if isinstance(rb, TensorDictReplayBuffer) else torch.arange(4))
    assert reason in (rb.export_reason() or "")
    assert rb.export_shared() is None
    assert not rb.lock.__class__.__module__.startswith("multiprocessing")  # nothing changed


def test_a_list_storage_is_not_exported() -> None:
    rb = ReplayBuffer(storage=ListStorage(8))
    rb.extend([1, 2, 3])
    assert rb.export_shared() is None


def test_an_unrelated_process_writes_where_the_owner_samples(tmp_path: Path) -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(64), batch_size=16)
    rb.extend(rows(8))
    handle = rb.export_shared()
    assert handle is not None
    (tmp_path / "handle").write_bytes(handle)
    script = textwrap.dedent(
        f"""
        import pickle, sys, torch
        from tensordict import TensorDict
        from rbdata.sharing.handle import import_shared
        data = open({str(tmp_path / "handle")!r}, "rb").read()
        rb = import_shared(data, lambda: True, RuntimeError)
        ids = torch.arange(8, 40)
        obs = ids.float().unsqueeze(-1).expand(32, 8)
        index = rb.extend(TensorDict({{"id": ids, "obs": obs}}, [32]))
        print(index.tolist() == list(range(8, 40)), len(rb))
        """
    )
    command = [sys.executable, "-c", script]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "40"]
    assert len(rb) == 40 and rb.write_count == 40
    assert torch.equal(rb[:]["id"], torch.arange(40))  # every row once, in place
    assert torch.equal(rb[:]["obs"][:, 0], torch.arange(40).float())  # no torn row
    batch = rb.sample()
    assert torch.equal(batch["obs"][:, 3], batch["id"].float())


def test_a_copy_stops_waiting_once_its_owner_is_gone() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(torch.arange(4))
    copy = import_shared(rb.export_shared(), lambda: False, lambda: ConnectionError("gone"))  # type: ignore[arg-type]
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with rb.lock:  # the owner (another thread here) holds its lock and "dies"
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait(10)
    try:
        with pytest.raises(ConnectionError, match="gone"):
            copy.extend(torch.arange(2))
    finally:
        release.set()
        holder.join()
    assert rb.write_count == 4  # the failed write changed nothing
    assert copy.extend(torch.arange(2)).tolist() == [4, 5]  # free again: the copy writes


def test_a_buffer_whose_sampler_holds_process_local_state_is_exported() -> None:
    """Was: ``AttributeError: '_Spawning' object has no attribute 'DupFd'``.

    A without-replacement sampler's pass order is memory of this process
    only (not shared); the export copies it rather than sharing it.
    """
    rb = ReplayBuffer(
        storage=LazyTensorStorage(8), sampler=SamplerWithoutReplacement(), batch_size=4
    )
    rb.extend(torch.arange(8))
    first = rb.sample()
    data = rb.export_shared()
    assert data is not None
    copy = import_shared(data, lambda: True, RuntimeError)
    rest = copy.sample()  # the copy goes on with the pass the owner started
    assert sorted([*first.tolist(), *rest.tolist()]) == list(range(8))
    copy.extend(torch.arange(100, 102))
    assert rb[:].tolist()[:2] == [100, 101]  # and writes into the owner's rows


def test_an_export_names_nothing_in_dev_shm_but_its_lock() -> None:
    """Was: one ``torch_<pid>_*`` file per shared tensor, left when Ray killed the owner."""
    mine = f"torch_{os.getpid()}_"
    before = set(os.listdir("/dev/shm"))
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(64), batch_size=16)
    rb.extend(rows(8))
    assert rb.export_shared() is not None
    new = set(os.listdir("/dev/shm")) - before
    assert not [name for name in new if name.startswith(mine)]
    assert all(name.startswith(f"rbdata-{os.getpid()}-") for name in new), new
    assert len(new) <= 1  # the lock's file


def test_a_handle_whose_owner_is_gone_is_an_os_error(tmp_path: Path) -> None:
    """The owner's descriptors went with it: importing its handle fails, maps nothing else."""
    pid = os.fork()
    if pid == 0:  # the owner: exports, then exits
        rb = ReplayBuffer(storage=LazyTensorStorage(8))
        rb.extend(torch.arange(4))
        (tmp_path / "handle").write_bytes(rb.export_shared() or b"")
        os._exit(0)
    os.waitpid(pid, 0)
    try:
        with pytest.raises(OSError, match="is gone"):
            import_shared((tmp_path / "handle").read_bytes(), lambda: False, RuntimeError)
    finally:
        sweep()  # the lock file the owner, gone without its exit handlers, left
