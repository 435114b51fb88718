"""Dump and load a buffer of N GiB, beside a plain copy of the dump's files.

``dumps`` writes raw tensor files (with an xxh3 checksum each) and fsyncs
them; ``loads`` reads and checks them all. The reference is copying the
dump directory (``shutil.copytree``: read + write, page cache warm), once
plain and once with an fsync per file as ``dumps`` does.

Usage: python benchmarks/bench_dump.py --gib 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, TensorDictReplayBuffer

ROW = 1024  # bytes per row


def _copy_with_fsync(src: str, dst: str) -> str:
    shutil.copy2(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return dst


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="buffer size in GiB")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    rows = int(args.gib * 2**30) // ROW
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(rows))
    obs = torch.randint(0, 256, (rows, ROW - 8), dtype=torch.uint8)
    rb.extend(TensorDict({"obs": obs, "id": torch.arange(rows)}, [rows]))
    del obs
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        dump = Path(tmp) / "dump"
        dump_s = _timed(lambda: rb.dumps(dump))
        fresh = TensorDictReplayBuffer(storage=LazyTensorStorage(rows))
        load_s = _timed(lambda: fresh.loads(dump))
        assert fresh.write_count == rows
        fresh.empty()
        copy_s = _timed(lambda: shutil.copytree(dump, Path(tmp) / "copy"))
        sync_s = _timed(
            lambda: shutil.copytree(dump, Path(tmp) / "copy-fsync", copy_function=_copy_with_fsync)
        )
    gib = rows * ROW / 2**30
    print(f"buffer {gib:.2f} GiB ({rows} rows of {ROW} bytes)")
    print(f"dumps {dump_s:.2f} s, loads {load_s:.2f} s, together {dump_s + load_s:.2f} s")
    print(f"copytree {copy_s:.2f} s, copytree + fsync per file {sync_s:.2f} s")
    for name, ref in (("copytree", copy_s), ("copytree + fsync", sync_s)):
        print(
            f"vs {name}: dumps {dump_s / ref:.2f}x, loads {load_s / ref:.2f}x, "
            f"together {(dump_s + load_s) / ref:.2f}x"
        )


if __name__ == "__main__":
    main()
