"""``rbdata bench``: run scenarios of ``benchmarks/run.py`` by name, optionally plot them."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "benchmarks_dir", "run", "scenario_names"]


def benchmarks_dir() -> Path:
    """The ``benchmarks/`` directory of the source checkout rbdata runs from.

    Examples:
        >>> from rbdata.cli.bench import benchmarks_dir
        >>> benchmarks_dir().name
        'benchmarks'
    """
    return Path(__file__).resolve().parents[2] / "benchmarks"


def add_parser(sub: Any) -> None:
    """Register ``bench`` on the sub-parsers of the ``rbdata`` parser."""
    parser = sub.add_parser(
        "bench",
        help="run benchmark scenarios (benchmarks/run.py) and optionally plot them",
        description="Run scenarios of benchmarks/run.py by name (all of them when none is "
        "named) and print rbdata's throughput beside the plain-torch limit. Benchmarks need a "
        "source checkout: they are not installed with the package.",
    )
    parser.add_argument("scenarios", nargs="*", help="row names, e.g. sample per slice loader")
    parser.add_argument("--json", metavar="OUT.json", help="keep the results as JSON")
    parser.add_argument(
        "--plot",
        metavar="OUT.png",
        help="draw the ratios to the limit as a bar chart (benchmarks/plot.py, needs matplotlib)",
    )
    parser.add_argument("--vs-torchrl", action="store_true", help="also run torchrl's rows")
    parser.add_argument(
        "--benchmarks",
        metavar="DIR",
        type=Path,
        default=None,
        help="directory holding run.py and plot.py (default: the checkout's benchmarks/)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``run.py`` (and ``plot.py``) in a child Python; return the first failing status."""
    directory = args.benchmarks or benchmarks_dir()
    scripts = {name: directory / f"{name}.py" for name in ("run", "plot")}
    needed = ["run", "plot"] if args.plot else ["run"]
    for name in needed:
        if not scripts[name].is_file():
            raise FileNotFoundError(
                f"{str(scripts[name])!r} not found: benchmarks run from a source checkout "
                "(or pass --benchmarks DIR)."
            )
    known = scenario_names(scripts["run"])
    unknown = [name for name in args.scenarios if known is not None and name not in known]
    if unknown:
        raise ValueError(
            f"unknown scenario{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: choose "
            f"from {', '.join(known or ())} (none: all of them)."
        )
    with tempfile.TemporaryDirectory(prefix="rbdata-bench-") as tmp:
        results = args.json or str(Path(tmp) / "results.json")
        command = [sys.executable, str(scripts["run"]), "--json", results]
        if args.scenarios:
            command += ["--rows", ",".join(args.scenarios)]
        if args.vs_torchrl:
            command.append("--vs-torchrl")
        status = subprocess.run(command, check=False).returncode
        if status or not args.plot:
            return status
        plot = [sys.executable, str(scripts["plot"]), results, args.plot]
        return subprocess.run(plot, check=False).returncode


def scenario_names(run_py: Path) -> list[str] | None:
    """The scenario names ``run.py`` accepts (its ``ROWS`` keys and ``_SEPARATE`` names).

    Read from the script's source without running it (importing it would load
    torch); None when the script does not declare them that way.

    Examples:
        >>> from rbdata.cli.bench import benchmarks_dir, scenario_names
        >>> "sample" in scenario_names(benchmarks_dir() / "run.py")
        True
    """
    try:
        tree = ast.parse(run_py.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    names: list[str] = []
    found = False
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if not (isinstance(target, ast.Name) and target.id in ("ROWS", "_SEPARATE")):
            continue
        elements = value.keys if isinstance(value, ast.Dict) else None
        if isinstance(value, ast.Tuple | ast.List):
            elements = list(value.elts)
        if elements is None:
            return None
        found = True
        for element in elements:
            if not (isinstance(element, ast.Constant) and isinstance(element.value, str)):
                return None
            names.append(element.value)
    return names if found else None
