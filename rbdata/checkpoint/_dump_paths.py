"""Names of the entries of a dump directory and of the temporaries beside it.

A dump at ``path`` is the directory::

    path/
      manifest.json      what the dump holds: summary, state tree, one entry per data file
      data-<id>/         the data files the manifest names, and nothing else
        0.bin, 1.bin...  raw bytes of one tensor each (C order, the manifest's byte order)
        objects.pkl      only for a list storage holding objects JSON cannot describe

A dump is written in ``.<name>.rbdata-tmp-<id>`` beside ``path`` and swapped
into place. Where the swap has to be done in place (no exchange rename), the
new ``data-<id>`` is moved into ``path`` first and ``manifest.json`` is
replaced last, so ``path`` may briefly hold another ``data-<id>`` directory
that no manifest names: readers ignore it and the next dump removes it.
"""

from __future__ import annotations

import re
import secrets

FORMAT_VERSION = 2
MANIFEST = "manifest.json"
OBJECTS = "objects.pkl"
MAX_MANIFEST_BYTES = 1 << 30  # a manifest describes data; one larger than this is not ours

_DATA = re.compile(r"data-[0-9a-f]{16}")
_LEAF = re.compile(r"(0|[1-9][0-9]{0,8})\.bin")
_TMP_MARK = ".rbdata-"


def new_id() -> str:
    """A fresh 16-hex-digit id for a data directory or a temporary."""
    return secrets.token_hex(8)


def data_dir_name(dump_id: str) -> str:
    """The name of the data directory of the dump ``dump_id``."""
    return f"data-{dump_id}"


def is_data_dir_name(name: str) -> bool:
    """Whether ``name`` is the name of a data directory."""
    return _DATA.fullmatch(name) is not None


def is_leaf_name(name: str) -> bool:
    """Whether ``name`` is the name of a tensor file (``<n>.bin``)."""
    return _LEAF.fullmatch(name) is not None


def leaf_name(position: int) -> str:
    """The file name of the ``position``-th tensor of a dump."""
    return f"{position}.bin"


def temporary_name(target: str) -> str:
    """A fresh name, beside the dump ``target``, to write its next version in."""
    return f".{target}{_TMP_MARK}tmp-{new_id()}"


def is_temporary_of(name: str, target: str) -> bool:
    """Whether ``name`` is a temporary left beside the dump ``target`` (a killed dump)."""
    return name.startswith(f".{target}{_TMP_MARK}")
