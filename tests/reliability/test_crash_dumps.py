"""Crash campaign: a dumping process SIGKILLed before every filesystem operation and at random.

The driver (``_crash_child.py``) runs in its own interpreter and forks the
processes it kills; see its docstring. Each kill must leave at the path the
old or the new dump, complete (verify_dump passes) and loadable (the loaded
state equals that version's state_dict exactly), and the next dump must
remove everything the killed one left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RANDOM_KILLS = 30

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the campaign forks processes")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    # A RAM file system where there is one: SIGKILL leaves the kernel's view of the
    # files as it was, whatever the disk; fsync there costs nothing.
    ram = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = Path(tempfile.mkdtemp(dir=ram)) if ram else tmp_path_factory.mktemp("crash")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("_crash_child.py")),
            str(root),
            str(RANDOM_KILLS),
            "0",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    yield json.loads(done.stdout)


@pytest.mark.parametrize("mode", ["exchange", "in_place"])
def test_a_kill_before_each_operation_leaves_the_old_or_the_new_dump(report, mode):
    campaign = report[mode]
    trials = campaign["trials"]
    assert campaign["ops"] > 20  # mkdir, open, write, fsync, rename... of one dump, all of them
    assert len(trials) == campaign["ops"] + 1
    assert [t["status"] for t in trials] == [-signal.SIGKILL] * campaign["ops"] + [0]
    found = [t["found"] for t in trials]
    switch = found.index("new")
    # One atomic step switches versions: every kill before it leaves the old dump, every
    # kill after it the new one; none leaves anything else.
    assert switch > 0 and found == ["old"] * switch + ["new"] * (len(found) - switch)
    assert any(t["leftovers"] for t in trials)  # killed dumps did leave temporaries ...
    assert all(t["after_next_dump"] == [] for t in trials)  # ... which the next dump removed
    assert all(t["next_is_old"] for t in trials)


def test_the_exchange_rename_is_used_where_the_os_has_it(report):
    assert report["exchange_available"] == sys.platform.startswith("linux")


def test_kills_at_random_moments_leave_a_complete_dump(report):
    trials = report["random"]["trials"]
    assert len(trials) == RANDOM_KILLS
    assert {t["found"] for t in trials} <= {"old", "new"}
    assert all(t["after_next_dump"] == [] for t in trials)
