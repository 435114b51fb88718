"""The ``rbdata`` command: inspect and check replay-buffer dumps.

Examples:
    $ rbdata inspect runs/buffer-dump
    $ rbdata verify runs/buffer-dump
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rbdata.checkpoint import CheckpointError, read_dump

__all__ = ["main"]


def _inspect(path: str) -> int:
    manifest, _, _ = read_dump(path)
    print(json.dumps(manifest, indent=2, sort_keys=True))
    return 0


def _verify(path: str) -> int:
    manifest, state, objects = read_dump(path)
    storage = state.get("storage", {})
    length = manifest.get("length")
    content = storage.get("content", {})
    bad = [k for k, v in content.items() if v.shape[0] < (length or 0)]
    if objects is not None and len(objects) < (length or 0):
        bad.append("items")
    if bad:
        print(f"{path}: entries shorter than the manifest length {length}: {bad}", file=sys.stderr)
        return 1
    print(f"{path}: ok ({length} items, components {manifest.get('components')})")
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
