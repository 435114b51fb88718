"""Nothing of rbdata's left in /dev/shm by a Ray-backed buffer mapped by same-node clients.

Each scenario runs a whole Ray session (``ray.init`` to ``ray.shutdown``) in
a private mount namespace with its own tmpfs on ``/dev/shm`` (``unshare -m``,
as root), so what it leaves is seen and nothing of the machine's
``/dev/shm`` is touched (driver: ``_ray_shm_child.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray
pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

CHILD = Path(__file__).with_name("_ray_shm_child.py")
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


def run(scenario: str) -> tuple[int, str, list[str]]:
    """``(exit code, output, entries left in the private /dev/shm)`` of a scenario."""
    script = (
        "mount -t tmpfs -o size=512m tmpfs /dev/shm && "
        f"{sys.executable} {CHILD} {scenario}; echo rc=$?; ls -A /dev/shm"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
        check=False,
    )
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("rc="))
    return int(lines[at][3:]), "\n".join(lines[:at]) + done.stderr, lines[at + 1 :]


@pytest.mark.skipif(not _private_shm_works(), reason="needs root and mount namespaces")
@pytest.mark.parametrize("scenario", ["clean", "killed"])
def test_a_mapped_ray_buffer_leaves_nothing_after_shutdown(scenario: str) -> None:
    """Was: the lock file and six ``torch_*`` files (the rows, counters) left for good.

    ``clean``: the driver and a task mapped the buffer, then ``rb.shutdown()``
    and ``ray.shutdown()``. ``killed``: the task was SIGKILLed mid-copy through
    its map first (Ray's retry wrote its rows again).
    """
    code, out, left = run(scenario)
    assert code == 0, out
    assert "rows" in out
    assert left == [], left  # no rbdata-*, torch_* or sem.* entry: nothing at all
