"""The ``rbdata`` command: inspect, verify and convert replay data; run the benchmarks.

Every command has ``--help``. A bad path or format is answered with one line
on stderr and exit status 2; ``--traceback`` (or ``-v``) prints the whole
error instead. The command modules import what they need when they run, not
when the parser is built.

Examples:
    $ rbdata inspect runs/buffer-dump --plot buffer.png
    $ rbdata verify runs/buffer-dump
    $ rbdata convert D4RL/door/human-v2 door.hdf5
    $ rbdata bench sample per --plot bench.png
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from rbdata.cli import bench, convert, inspect, verify

__all__ = ["main"]

_COMMANDS = (inspect, verify, convert, bench)
# What a bad path, file or format raises; answered with one line, not a traceback.
_USER_ERRORS = (OSError, ValueError, KeyError, ImportError)
_DESCRIPTION = "Inspect, verify and convert replay data; run the benchmarks."
_EPILOG = (
    "A bad path or format gets one line on stderr and exit status 2; add --traceback (-v) "
    "to see the whole error. 'rbdata COMMAND --help' describes a command."
)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``rbdata`` argument parser, one sub-command per module of this package.

    Examples:
        >>> from rbdata.cli import build_parser
        >>> build_parser().parse_args(["verify", "runs/dump"]).path
        'runs/dump'
    """
    from rbdata import __version__

    parser = _Parser(prog="rbdata", description=_DESCRIPTION, epilog=_EPILOG)
    parser.add_argument("--version", action="version", version=f"rbdata {__version__}")
    parser.add_argument(
        "-v",
        "--traceback",
        action="store_true",
        help="on an error, print the whole traceback instead of one line",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in _COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rbdata`` command line.

    Args:
        argv: the arguments (defaults to ``sys.argv[1:]``).

    Returns:
        The process exit status: 0 on success, 1 when ``verify`` finds a
        problem, 2 for a bad path, format or argument.

    Examples:
        >>> from rbdata.cli import main
        >>> main(["verify", "/nonexistent/dump"])
        2
    """
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except _USER_ERRORS as err:
        if args.traceback:
            traceback.print_exc()
            return 2
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        first_line = str(message).strip().splitlines()[0] if str(message).strip() else repr(err)
        print(
            f"rbdata {args.command}: {first_line.rstrip('.')} ({type(err).__name__}; "
            f"--traceback shows where)",
            file=sys.stderr,
        )
        return 2
