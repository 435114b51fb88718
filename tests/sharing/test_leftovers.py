"""Nothing of rbdata's left in /dev/shm, and a too small /dev/shm is a Python error.

Each scenario runs in a private mount namespace with its own tmpfs on
``/dev/shm`` (``unshare -m``, as root), so what it leaves is seen, and
nothing of the machine's ``/dev/shm`` is touched; after the scenario's
process exited, a listing of that tmpfs shows what stayed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from private_shm import private_shm_works, run_in_private_shm

CHILD = Path(__file__).with_name("_shm_child.py")


pytestmark = pytest.mark.skipif(
    not private_shm_works(), reason="needs root and mount namespaces (unshare -m)"
)


def run(scenario: str, size: str = "64m") -> tuple[int, str, list[str]]:
    """``(exit code, output, rbdata entries left in /dev/shm)`` of a scenario."""
    code, out, left = run_in_private_shm(CHILD, scenario, size=size, timeout=120)
    return code, out, [name for name in left if name.startswith("rbdata-")]


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
