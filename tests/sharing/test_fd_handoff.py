"""Handing shared memory to an unrelated process by its file descriptors (sharing/fd_handoff.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from rbdata import LazyTensorStorage, ReplayBuffer
from rbdata.sharing.fd_handoff import dump_with_fds, sender_key

ROOT = Path(__file__).resolve().parents[2]

_RECEIVER = """
import sys
from pathlib import Path
import torch
from rbdata.sharing.fd_handoff import load_with_fds
tmp = Path(sys.argv[1])
key = bytes.fromhex(sys.argv[2])
try:
    rb = load_with_fds((tmp / "dump").read_bytes(), key)
except Exception as error:
    print(type(error).__name__)
    raise SystemExit(3)
rb.extend(torch.arange(4) + 100)
print(len(rb))
"""


def _receive(tmp_path: Path, key: bytes) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _RECEIVER, str(tmp_path), key.hex()],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unrelated_process_writes_into_the_senders_memory(tmp_path: Path):
    rb = ReplayBuffer(storage=LazyTensorStorage(16)).share()
    rb.extend(torch.arange(3))
    (tmp_path / "dump").write_bytes(dump_with_fds(rb))
    done = _receive(tmp_path, sender_key())
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["7"]
    assert len(rb) == 7 and rb[:].tolist() == [0, 1, 2, 100, 101, 102, 103]  # no copy


def test_without_the_senders_key_nothing_is_handed_over(tmp_path: Path):
    rb = ReplayBuffer(storage=LazyTensorStorage(16)).share()
    rb.extend(torch.arange(3))
    (tmp_path / "dump").write_bytes(dump_with_fds(rb))
    done = _receive(tmp_path, b"not the key")
    assert done.returncode == 3 and "AuthenticationError" in done.stdout
    assert len(rb) == 3
