"""The on-disk format of ``ReplayBuffer.dumps`` / ``loads``.

A dump is a directory::

    path/
      manifest.json   format version, component classes, keys/shapes/dtypes,
                      length, cursor (written last: a dump without it is partial)
      state.pt        tensors and plain values, loaded with ``weights_only=True``
      objects.pkl     only for ListStorage-like storages holding arbitrary objects

It is written into a sibling temporary directory and renamed into place, so
a crash mid-dump never leaves a half-written dump at ``path``.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch

__all__ = ["FORMAT_VERSION", "CheckpointError", "read_dump", "write_dump"]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
STATE = "state.pt"
OBJECTS = "objects.pkl"


class CheckpointError(ValueError, FileNotFoundError):
    """A dump directory is missing, partial, corrupt or does not match the buffer.

    It is both a ValueError and a FileNotFoundError, so either ``except`` catches it.

    Examples:
        >>> from rbdata import CheckpointError, ReplayBuffer
        >>> try:
        ...     ReplayBuffer().loads("/nonexistent/dump")
        ... except CheckpointError as err:
        ...     print(type(err).__name__)
        CheckpointError
    """


def write_dump(
    path: str | os.PathLike, manifest: dict[str, Any], state: dict[str, Any], objects: Any = None
) -> Path:
    """Atomically write a dump at ``path`` (replacing any previous dump there).

    Args:
        path: target directory (created; an existing directory is replaced whole).
        manifest: JSON-able description; ``format_version`` is added.
        state: tensors and plain Python values (saved with ``torch.save``).
        objects: optional arbitrary Python objects (pickled), for list storages.

    Returns:
        The target path.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.rbdata-tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        torch.save(state, tmp / STATE)
        if objects is not None:
            with open(tmp / OBJECTS, "wb") as f:
                pickle.dump(objects, f, protocol=pickle.HIGHEST_PROTOCOL)
        _write_json(tmp / MANIFEST, {"format_version": FORMAT_VERSION, **manifest})
        _swap_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def read_dump(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Read and check a dump written by :func:`write_dump`.

    Returns:
        ``(manifest, state, objects)``; ``objects`` is None when none were saved.

    Raises:
        CheckpointError: if the directory is missing, partial or of another format.
    """
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"no replay-buffer dump at {str(root)!r}: directory not found.")
    if not (root / MANIFEST).is_file():
        raise CheckpointError(
            f"{str(root)!r} is not a complete replay-buffer dump: {MANIFEST} is missing "
            "(the dump was interrupted or the directory is something else)."
        )
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{str(root / MANIFEST)!r} is not valid JSON: {err}.") from err
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"dump at {str(root)!r} has format_version {version!r}; this rbdata reads "
            f"format_version {FORMAT_VERSION}."
        )
    if not (root / STATE).is_file():
        raise CheckpointError(f"dump at {str(root)!r} is partial: {STATE} is missing.")
    state = torch.load(root / STATE, weights_only=True, map_location="cpu")
    objects = None
    if (root / OBJECTS).is_file():
        with open(root / OBJECTS, "rb") as f:
            objects = pickle.load(f)  # noqa: S301 - list storages hold arbitrary user objects
    return manifest, state, objects


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def _swap_into_place(tmp: Path, target: Path) -> None:
    if not target.exists():
        os.replace(tmp, target)
        return
    old = target.parent / f".{target.name}.rbdata-old-{uuid.uuid4().hex[:8]}"
    os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
