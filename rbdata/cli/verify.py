"""``rbdata verify DIR``: check that a replay-buffer dump is complete and readable."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rbdata.checkpoint import read_dump

__all__ = ["add_parser", "check_dump", "run"]


def add_parser(sub: Any) -> None:
    """Register ``verify`` on the sub-parsers of the ``rbdata`` parser."""
    parser = sub.add_parser(
        "verify",
        help="check that a dump is complete and readable",
        description="Check that a replay-buffer dump is complete and readable: exit status 0 "
        "when it is, 1 when its entries are shorter than its manifest says, 2 when it is "
        "missing, partial or of another format.",
    )
    parser.add_argument("path", help="directory written by ReplayBuffer.dumps")
    parser.set_defaults(run=run)


def check_dump(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[str]]:
    """A dump's manifest and its entries shorter than the manifest's length (none: sound).

    Raises:
        CheckpointError: if the dump is missing, partial or of another format.

    Examples:
        >>> import tempfile, torch
        >>> from rbdata import ReplayBuffer
        >>> from rbdata.cli.verify import check_dump
        >>> rb = ReplayBuffer()
        >>> _ = rb.extend(torch.arange(4))
        >>> path = tempfile.mkdtemp() + "/dump"
        >>> rb.dumps(path)
        >>> manifest, short = check_dump(path)
        >>> manifest["length"], short
        (4, [])
    """
    manifest, state, objects = read_dump(path)
    length = manifest.get("length") or 0
    content = state.get("storage", {}).get("content", {})
    bad = [key for key, value in content.items() if value.shape[0] < length]
    if objects is not None and len(objects) < length:
        bad.append("items")
    return manifest, bad


def run(args: argparse.Namespace) -> int:
    """Print whether the dump at ``args.path`` is sound; 1 if it is not."""
    manifest, bad = check_dump(args.path)
    length = manifest.get("length")
    if bad:
        print(
            f"{args.path}: entries shorter than the manifest length {length}: {bad}",
            file=sys.stderr,
        )
        return 1
    print(f"{args.path}: ok ({length} items, components {manifest.get('components')})")
    return 0
