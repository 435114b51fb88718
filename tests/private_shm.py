"""Run a script in a private mount namespace with its own tmpfs on ``/dev/shm``.

What the script leaves there is listed after it exits, and nothing of the
machine's ``/dev/shm`` is touched (``unshare -m``, as root). Used by the
leftover tests of the sharing layer and of the Ray service.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def private_shm_works() -> bool:
    """Whether this process may make a mount namespace with its own ``/dev/shm``."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def run_in_private_shm(
    child: Path, scenario: str, *, size: str, timeout: float
) -> tuple[int, str, list[str]]:
    """``(exit code, output, entries left in the private /dev/shm)`` of ``child scenario``."""
    script = (
        f"mount -t tmpfs -o size={size} tmpfs /dev/shm && "
        f"{sys.executable} {child} {scenario}; echo rc=$?; ls -A /dev/shm"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("rc="))
    return int(lines[at][3:]), "\n".join(lines[:at]) + done.stderr, lines[at + 1 :]
