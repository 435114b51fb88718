"""``rbdata convert SRC DST``: between Minari, D4RL-style HDF5, dumps and memmap directories.

The transitions stream through in chunks (``--chunk-rows``, by default about
64 MiB each), so a dataset larger than memory converts; only a ``dumps``
source, one ``torch.save`` file, is read whole.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rbdata.cli._formats import FORMATS

if TYPE_CHECKING:  # the work imports torch: done in convert(), so that --help stays fast
    from tensordict import TensorDictBase
    from tqdm.auto import tqdm

    from rbdata.cli._sources import Source

__all__ = ["add_parser", "convert", "run"]

_CHUNK_BYTES = 64 << 20
_PROGRESS_DELAY_S = 0.5  # a progress bar appears only for conversions that take longer
_HDF5_SUFFIXES = (".hdf5", ".h5")


def add_parser(sub: Any) -> None:
    """Register ``convert`` on the sub-parsers of the ``rbdata`` parser."""
    parser = sub.add_parser(
        "convert",
        help="convert between Minari, D4RL-style HDF5, dumps and memmap TensorDict directories",
        description="Convert replay data between Minari datasets, D4RL-style HDF5 files, "
        "ReplayBuffer.dumps directories and memory-mapped TensorDict directories. "
        "SRC's format is detected (a Minari dataset id under $MINARI_DATASETS_PATH counts); "
        "DST's from a .hdf5/.h5 suffix (d4rl), else give --to. DST must not exist; relative "
        "paths are taken from the current directory. The data streams through in chunks, so "
        "a dataset larger than memory converts (a dumps source is read whole).",
    )
    parser.add_argument("src", help="a Minari dataset (id or directory), .hdf5 file or directory")
    parser.add_argument("dst", help="where to write (must not exist)")
    parser.add_argument("--to", choices=FORMATS, help="DST's format")
    parser.add_argument(
        "--chunk-rows",
        type=int,
        default=None,
        metavar="N",
        help="transitions per chunk (default: about 64 MiB worth)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(run=run)


def convert(
    src: str,
    dst: str | Path,
    *,
    to: str | None = None,
    chunk_rows: int | None = None,
    progress: bool = True,
) -> tuple[str, str, int, list[str]]:
    """Convert ``src`` to ``dst``, chunk by chunk.

    Args:
        src: the source (its format is detected).
        dst: the destination, which must not exist.
        to: the destination's format (one of ``minari``, ``d4rl``, ``dumps``,
            ``memmap``); None: ``d4rl`` for a ``.hdf5`` / ``.h5`` name.
        chunk_rows: transitions per chunk; None: about 64 MiB worth.
        progress: show a progress bar on stderr.

    Returns:
        ``(source format, destination format, transitions, keys not written)``.

    Raises:
        FileNotFoundError: if ``src`` does not exist.
        FileExistsError: if ``dst`` does.
        ValueError: for a format that cannot be told or cannot hold the data.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata.cli.convert import convert
        >>> root = tempfile.mkdtemp()
        >>> _ = TensorDict({"x": torch.arange(10)}, [10]).memmap(f"{root}/mm")
        >>> convert(f"{root}/mm", f"{root}/dump", to="dumps", chunk_rows=4, progress=False)
        ('memmap', 'dumps', 10, [])
    """
    from tqdm.auto import tqdm

    from rbdata.cli._minari_sink import write_minari
    from rbdata.cli._sinks import write_d4rl, write_dump, write_memmap
    from rbdata.cli._sources import open_source
    from rbdata.datasets import offline_data_format

    dst = Path(os.path.abspath(os.path.expanduser(dst)))  # writers may change directory
    src_format = offline_data_format(src)
    dst_format = to or _destination_format(dst)
    if chunk_rows is not None and (isinstance(chunk_rows, bool) or chunk_rows < 1):
        raise ValueError(f"chunk_rows must be an int >= 1 or None, got {chunk_rows!r}.")
    source = open_source(src, src_format)
    n = len(source)
    rows = chunk_rows or max(1, _CHUNK_BYTES // max(1, source.row_bytes))
    with tqdm(
        total=n,
        unit="steps",
        desc=f"converting {Path(src).name}",
        disable=not progress,
        delay=_PROGRESS_DELAY_S,
    ) as bar:
        chunks = _counted(source, rows, bar)
        if dst_format == "minari":
            dropped = write_minari(dst, chunks, rows)
        else:
            writer = {"d4rl": write_d4rl, "dumps": write_dump, "memmap": write_memmap}[dst_format]
            dropped = writer(dst, chunks, n)
    return src_format, dst_format, n, dropped


def run(args: argparse.Namespace) -> int:
    """Convert ``args.src`` to ``args.dst`` and say what was written."""
    src_format, dst_format, n, dropped = convert(
        args.src, args.dst, to=args.to, chunk_rows=args.chunk_rows, progress=not args.no_progress
    )
    if dropped:
        print(
            f"rbdata convert: {dst_format} has no place for {dropped}: not written", file=sys.stderr
        )
    print(f"{args.src} ({src_format}) -> {args.dst} ({dst_format}): {n} transitions")
    return 0


def _destination_format(dst: Path) -> str:
    if dst.suffix.lower() in _HDF5_SUFFIXES:
        return "d4rl"
    raise ValueError(
        f"cannot tell the format of {str(dst)!r} from its name: pass --to "
        f"{{{','.join(FORMATS)}}} (a .hdf5/.h5 name means d4rl)."
    )


def _counted(source: Source, rows: int, bar: tqdm[Any]) -> Iterator[TensorDictBase]:
    for chunk in source.chunks(rows):
        yield chunk
        bar.update(chunk.shape[0])
