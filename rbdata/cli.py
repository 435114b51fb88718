"""The ``rbdata`` command: inspect and check replay-buffer dumps.

Examples:
    $ rbdata inspect runs/buffer-dump
    $ rbdata verify runs/buffer-dump
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from rbdata.checkpoint import CheckpointError, read_dump, verify_dump

__all__ = ["main"]


def _inspect(path: str) -> int:
    manifest, _, _ = read_dump(path)
    print(json.dumps(manifest, indent=2, sort_keys=True))
    return 0


def _verify(path: str) -> int:
    """Check every file of the dump at ``path``; print one line; 0 ok, 1 damaged, 2 bad path."""
    try:
        summary = verify_dump(path)
    except CheckpointError as err:
        if not os.path.isdir(path):
            raise  # not a dump directory at all: main reports it (exit status 2)
        print(f"{path}: damaged: {' '.join(str(err).splitlines())}", file=sys.stderr)
        return 1
    print(
        f"{path}: ok ({summary['length']} items, write_count {summary['write_count']}, "
        f"{summary['files']} files, {summary['bytes']} bytes checked, objects: "
        f"{summary['objects']}, components {summary['components']})"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rbdata`` command line.

    Args:
        argv: the arguments (defaults to ``sys.argv[1:]``).

    Returns:
        The process exit status.
    """
    parser = argparse.ArgumentParser(prog="rbdata", description="Inspect replay-buffer dumps.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("inspect", "print a dump's manifest (format, components, keys, shapes, length)"),
        ("verify", "check that a dump is complete and readable"),
    ):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("path", help="directory written by ReplayBuffer.dumps")
    args = parser.parse_args(argv)
    try:
        return _inspect(args.path) if args.command == "inspect" else _verify(args.path)
    except CheckpointError as err:
        print(f"rbdata: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
