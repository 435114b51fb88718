"""The offline data formats the command line names (as ``offline_data_format`` names them).

A module of its own, importing nothing, so that building the parser (``rbdata --help``)
imports neither torch nor tensordict.
"""

from __future__ import annotations

__all__ = ["FORMATS"]

FORMATS = ("minari", "d4rl", "dumps", "memmap")
