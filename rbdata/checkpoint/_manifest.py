"""Parsing a dump's manifest and checking that it is well formed (before any data is read)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from rbdata.errors import CheckpointError

from ._dump_paths import FORMAT_VERSION, OBJECTS, is_data_dir_name, is_leaf_name
from ._files import BYTEORDER, parse_dtype

RESERVED = ("format_version", "byteorder", "data", "files", "state", "objects")
_CHECKSUM = re.compile(r"[0-9a-f]{16}")
_TENSOR_KEYS = {"dtype", "shape", "nbytes", "xxh3_64"}
_BLOB_KEYS = {"nbytes", "xxh3_64"}


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = [k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i])]
        raise ValueError(f"duplicate key {seen[0]!r}")
    return out


def parse_manifest(raw: bytes, where: str) -> dict[str, Any]:
    """The manifest in ``raw``, checked for shape (CheckpointError naming ``where`` if not)."""
    try:
        manifest = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CheckpointError(f"{where}: not valid JSON ({err}).") from err
    if type(manifest) is not dict:
        raise CheckpointError(f"{where}: holds a JSON {type(manifest).__name__}, not an object.")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION or type(version) is not int:
        raise CheckpointError(
            f"{where}: format_version {version!r}; this rbdata reads format_version "
            f"{FORMAT_VERSION} (dump it again with the rbdata that wrote it, then with this one)."
        )
    if manifest.get("byteorder") != BYTEORDER:
        raise CheckpointError(
            f"{where}: byteorder {manifest.get('byteorder')!r}; this machine is {BYTEORDER!r}."
        )
    data = manifest.get("data")
    if type(data) is not str or not is_data_dir_name(data):
        raise CheckpointError(f"{where}: 'data' {data!r} is not a data directory name.")
    files = manifest.get("files")
    if type(files) is not dict:
        raise CheckpointError(f"{where}: 'files' must be an object, got {type(files).__name__}.")
    for name, entry in files.items():
        _check_entry(name, entry, f"{where}: files[{name!r}]")
    return manifest


def _count(value: Any, what: str, where: str) -> int:
    if type(value) is not int or value < 0:
        raise CheckpointError(f"{where}: {what} must be an int >= 0, got {value!r}.")
    return value


def _check_entry(name: str, entry: Any, where: str) -> None:
    if name != OBJECTS and not is_leaf_name(name):
        raise CheckpointError(f"{where}: not a data file name (<n>.bin or {OBJECTS}).")
    keys = _BLOB_KEYS if name == OBJECTS else _TENSOR_KEYS
    if type(entry) is not dict or set(entry) != keys:
        raise CheckpointError(f"{where}: must be an object with exactly the keys {sorted(keys)}.")
    nbytes = _count(entry["nbytes"], "nbytes", where)
    if type(entry["xxh3_64"]) is not str or not _CHECKSUM.fullmatch(entry["xxh3_64"]):
        raise CheckpointError(f"{where}: xxh3_64 must be 16 hex digits, got {entry['xxh3_64']!r}.")
    if name == OBJECTS:
        return
    shape = entry["shape"]
    if type(shape) is not list:
        raise CheckpointError(f"{where}: shape must be a list, got {shape!r}.")
    dims = [_count(d, "each dim of shape", where) for d in shape]
    itemsize = parse_dtype(entry["dtype"], where).itemsize
    if math.prod(dims) * itemsize != nbytes:
        raise CheckpointError(
            f"{where}: shape {dims} of {entry['dtype']} is {math.prod(dims) * itemsize} bytes, "
            f"nbytes says {nbytes}."
        )
