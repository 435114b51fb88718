"""Nothing of rbdata's left in /dev/shm, and a too small /dev/shm is a Python error.

Each scenario runs in a private mount namespace with its own tmpfs on
``/dev/shm`` (``unshare -m``, as root), so what it leaves is seen, and
nothing of the machine's ``/dev/shm`` is touched; after the scenario's
process exited, a listing of that tmpfs shows what stayed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("_shm_child.py")
ROOT = Path(__file__).parents[2]


def _private_shm_works() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(
    not _private_shm_works(), reason="needs root and mount namespaces (unshare -m)"
)


def run(scenario: str, size: str = "64m") -> tuple[int, str, list[str]]:
    """``(exit code, output, rbdata entries left in /dev/shm)`` of a scenario."""
    script = (
        f"mount -t tmpfs -o size={size} tmpfs /dev/shm && "
        f"{sys.executable} {CHILD} {scenario}; echo rc=$?; ls -a /dev/shm"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("rc="))
    left = [name for name in lines[at + 1 :] if name.startswith("rbdata-")]
    return int(lines[at][3:]), "\n".join(lines[:at]) + done.stderr, left


def test_a_crashed_writer_and_owner_leave_nothing_once_a_later_buffer_starts() -> None:
    """Was: each run left its rbdata-shared-* segment (16 MiB) and semaphores for good."""
    code, out, left = run("crash")
    assert code == 0, out
    assert "swept" in out
    assert left == []


def test_an_exception_leaves_nothing() -> None:
    code, out, left = run("exception")
    assert code == 1 and "the training script failed" in out
    assert left == []


def test_a_too_small_dev_shm_is_a_python_error_not_sigbus() -> None:
    """Was: SIGBUS (exit 135) at 28 MiB written into a 32 MiB /dev/shm."""
    code, out, left = run("small", size="8m")
    assert code == 0, out
    assert "refused:" in out and "32,000,000 bytes" in out
    assert "/dev/shm" in out and "--shm-size" in out
    assert left == []
