"""``rbdata verify DIR``: check that a replay-buffer dump is complete and readable."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rbdata.errors import CheckpointError

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register ``verify`` on the sub-parsers of the ``rbdata`` parser."""
    parser = sub.add_parser(
        "verify",
        help="check that a dump is complete and readable",
        description="Check every file of a replay-buffer dump (checksums, lengths, shapes, "
        "dtypes, counts) without loading it into a buffer: exit status 0 when it is sound, 1 "
        "when it is damaged, 2 when the path holds no dump.",
    )
    parser.add_argument("path", help="directory written by ReplayBuffer.dumps")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check every file of the dump at ``args.path``; print one line; 0 ok, 1 damaged.

    Raises:
        CheckpointError: when ``args.path`` is not a dump directory at all (exit status 2).
    """
    from rbdata.checkpoint import verify_dump  # imports torch: not when building the parser

    path = args.path
    try:
        summary = verify_dump(path)
    except CheckpointError as err:
        if not os.path.isdir(path) or not os.listdir(path):
            raise  # nothing there to check (exit status 2)
        print(f"{path}: damaged: {' '.join(str(err).splitlines())}", file=sys.stderr)
        return 1
    print(
        f"{path}: ok ({summary['length']} items, write_count {summary['write_count']}, "
        f"{summary['files']} files, {summary['bytes']} bytes checked, objects: "
        f"{summary['objects']}, components {summary['components']})"
    )
    return 0
