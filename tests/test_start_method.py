"""``import rbdata`` sets the "spawn" start method when none is set, as ``import torchrl`` does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch.multiprocessing as mp

from rbdata import ListStorage, TensorDictReplayBuffer
from rbdata._start_method import default_to_spawn

PROGRAM = """
import multiprocessing
chosen = {chosen!r}
if chosen:
    multiprocessing.set_start_method(chosen)
before = multiprocessing.get_start_method(allow_none=True)
import rbdata
print(before, multiprocessing.get_start_method(allow_none=True))
"""


def start_methods(chosen: str | None) -> list[str]:
    """The start method before and after ``import rbdata`` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROGRAM.format(chosen=chosen))],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


@pytest.mark.parametrize("chosen,expected", [(None, ["None", "spawn"]), ("fork", ["fork", "fork"])])
def test_import_sets_spawn_only_when_the_program_chose_no_start_method(
    chosen: str | None, expected: list[str]
) -> None:
    assert start_methods(chosen) == expected


def test_a_start_method_already_set_is_left_alone() -> None:
    before = mp.get_start_method(allow_none=True)
    assert before is not None  # this process imported rbdata
    default_to_spawn()
    assert mp.get_start_method(allow_none=True) == before


def test_a_plain_process_refuses_what_cannot_be_shared() -> None:
    rb = TensorDictReplayBuffer(storage=ListStorage(10))
    child = mp.Process(target=len, args=(rb,))  # the default context: spawn
    with pytest.raises(RuntimeError, match="Cannot share a storage of type ListStorage"):
        child.start()
