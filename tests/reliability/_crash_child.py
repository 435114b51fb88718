"""Crash campaign driver, run in its own interpreter by test_crash_dumps.py.

It dumps a buffer at a path, then forks children that dump another version
there and die by SIGKILL: before each filesystem operation of that dump in
turn (every one of them), or at random moments of repeated dumps. After every
kill it checks that the path holds one of the two versions, complete and
loadable, then dumps again and checks that nothing the killed dump left
remains. Prints one JSON report on stdout.

Usage: python _crash_child.py ROOT RANDOM_KILLS SEED
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

import rbdata.checkpoint._swap as swap
from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from rbdata.checkpoint import verify_dump

# os-level operations that change the file system (or make it durable), counted in the child
_HANG_S, _HUNG = 60.0, 999  # a child still running after _HANG_S seconds reports _HUNG
_OPS = ("mkdir", "open", "write", "fsync", "rename", "replace", "unlink", "rmdir")


def _buffer(rows: int, width: int, version: int) -> TensorDictPrioritizedReplayBuffer:
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(rows), batch_size=4
    )
    ids = torch.arange(rows * version, rows * (version + 1))
    rb.extend(TensorDict({"id": ids, "x": ids[:, None].float().expand(rows, width)}, [rows]))
    rb.update_priority(torch.arange(rows), (ids % 7 + 1).double())
    return rb


def _fresh(rows: int) -> TensorDictPrioritizedReplayBuffer:
    return TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(rows), batch_size=4
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def _which(path: Path, versions: dict[str, dict[str, Any]], rows: int) -> str:
    """The version at ``path`` ('old'/'new'), checked by verify and by a full load."""
    verify_dump(path)
    rb = _fresh(rows)
    rb.loads(path)
    sd = rb.state_dict()
    found = [name for name, want in versions.items() if _same(sd, want)]
    return found[0] if found else "neither"


def _leftovers(path: Path) -> list[str]:
    beside = [p.name for p in path.parent.iterdir() if p.name != path.name]
    manifest = json.loads((path / "manifest.json").read_text())
    inside = [n for n in os.listdir(path) if n not in ("manifest.json", manifest["data"])]
    return beside + inside


def _install_killer(kill_at: int, counter: list[int]) -> None:
    """Make the ``kill_at``-th counted operation SIGKILL this process before it runs."""

    def wrap(func: Any) -> Any:
        def op(*args: Any, **kwargs: Any) -> Any:
            counter[0] += 1
            if counter[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return func(*args, **kwargs)

        return op

    for name in _OPS:
        setattr(os, name, wrap(getattr(os, name)))
    swap.exchange = wrap(swap.exchange)


def _fork(child: Any) -> int:
    """Run ``child()`` in a forked process; its exit status or -signal."""
    pid = os.fork()
    if pid == 0:
        try:
            child()
            os._exit(0)
        except BaseException:
            os._exit(3)
    deadline = time.monotonic() + _HANG_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if time.monotonic() > deadline:  # a hung child is a failure, not a hung campaign
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return _HUNG
        time.sleep(0.001)


def _count_ops(new: TensorDictPrioritizedReplayBuffer, path: Path) -> int:
    read, write = os.pipe()

    def child() -> None:
        counter = [0]
        _install_killer(-1, counter)
        new.dumps(path)
        os.write(write, str(counter[0]).encode())

    _fork(child)
    os.close(write)
    count = int(os.read(read, 64))
    os.close(read)
    return count


def _every_operation(root: Path, in_place: bool) -> dict[str, Any]:
    rows = 16
    old, new = _buffer(rows, 3, 0), _buffer(rows, 3, 1)
    versions = {"old": old.state_dict(), "new": new.state_dict()}
    path = root / ("in-place" if in_place else "exchange") / "dump"
    old.dumps(path)
    ops = _count_ops(new, path)
    old.dumps(path)
    trials = []
    for kill_at in range(1, ops + 2):  # ops + 1: the dump runs to its end
        status = _fork(lambda k=kill_at: (_install_killer(k, [0]), new.dumps(path)))
        found = _which(path, versions, rows)
        left = _leftovers(path)
        old.dumps(path)  # the next dump: removes what the killed one left
        trials.append(
            {
                "kill_at": kill_at,
                "status": status,
                "found": found,
                "leftovers": len(left),
                "after_next_dump": _leftovers(path),
                "next_is_old": _which(path, versions, rows) == "old",
            }
        )
    return {"ops": ops, "trials": trials}


def _random_moments(root: Path, kills: int, seed: int) -> dict[str, Any]:
    rows = 2048
    old, new = _buffer(rows, 64, 0), _buffer(rows, 64, 1)
    versions = {"old": old.state_dict(), "new": new.state_dict()}
    path = root / "random" / "dump"
    old.dumps(path)
    start = time.perf_counter()
    new.dumps(path)
    one_dump = time.perf_counter() - start
    rng = random.Random(seed)
    trials = []
    for _ in range(kills):
        pid = os.fork()
        if pid == 0:
            while True:
                new.dumps(path)
                old.dumps(path)
        time.sleep(rng.uniform(0, 3 * one_dump))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        found = _which(path, versions, rows)
        left = _leftovers(path)
        old.dumps(path)
        trials.append({"found": found, "leftovers": len(left), "after_next_dump": _leftovers(path)})
    return {"one_dump_s": one_dump, "trials": trials}


def main() -> None:
    root, kills, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    start = time.perf_counter()
    report: dict[str, Any] = {"exchange_available": swap._RENAMEAT2 is not None}
    report["exchange"] = _every_operation(root, in_place=False)
    real_exchange = swap.exchange
    swap.exchange = lambda a, b: False  # as on a system without an exchange rename
    report["in_place"] = _every_operation(root, in_place=True)
    swap.exchange = real_exchange
    report["random"] = _random_moments(root, kills, seed)
    report["seconds"] = time.perf_counter() - start
    print(json.dumps(report))


if __name__ == "__main__":
    main()
