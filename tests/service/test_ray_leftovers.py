"""Nothing of rbdata's left in /dev/shm by a Ray-backed buffer mapped by same-node clients.

Each scenario runs a whole Ray session (``ray.init`` to ``ray.shutdown``) in
a private mount namespace with its own tmpfs on ``/dev/shm`` (``unshare -m``,
as root), so what it leaves is seen and nothing of the machine's
``/dev/shm`` is touched (driver: ``_ray_shm_child.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from private_shm import private_shm_works, run_in_private_shm

pytestmark = pytest.mark.ray
pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

CHILD = Path(__file__).with_name("_ray_shm_child.py")


def run(scenario: str) -> tuple[int, str, list[str]]:
    """``(exit code, output, entries left in the private /dev/shm)`` of a scenario."""
    return run_in_private_shm(CHILD, scenario, size="512m", timeout=240)


@pytest.mark.skipif(not private_shm_works(), reason="needs root and mount namespaces")
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
