"""Writing a dump beside its path, durably, then swapping it into place."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from rbdata._trust import check_trusted_dir
from rbdata.errors import CheckpointError, Unencodable

from ._dump_paths import (
    FORMAT_VERSION,
    MANIFEST,
    OBJECTS,
    data_dir_name,
    leaf_name,
    new_id,
    temporary_name,
)
from ._files import BYTEORDER, fsync_dir, write_file, write_tensor
from ._manifest import RESERVED
from ._state_tree import encode
from ._swap import remove_temporaries, swap_into_place

_PROGRESS_BYTES = 1 << 30  # dumps this large show a progress bar


def _check_replaceable(target: Path) -> None:
    """Refuse a ``target`` that is something other than nothing, an empty directory or a dump."""
    if not os.path.lexists(target):
        return
    if target.is_symlink() or not target.is_dir():
        raise CheckpointError(f"{target}: exists and is not a dump directory; not replacing it.")
    names = os.listdir(target)
    if names and MANIFEST not in names:
        raise CheckpointError(
            f"{target}: a non-empty directory without {MANIFEST} (not a dump); not replacing it."
        )


def _encode_objects(objects: Any, leaves: list[torch.Tensor]) -> tuple[Any, bytes | None]:
    """The objects' JSON node, or the pickle node and the pickled bytes if JSON cannot hold them."""
    if objects is None:
        return None, None
    known = len(leaves)
    try:
        return encode(objects, leaves, "objects"), None
    except Unencodable:
        del leaves[known:]
        return {"$pickle": OBJECTS}, pickle.dumps(objects, protocol=pickle.HIGHEST_PROTOCOL)


def _write_data(data: Path, leaves: list[torch.Tensor], pickled: bytes | None) -> dict[str, Any]:
    """Write every leaf (and the pickle) into the new directory ``data``; their manifest entries."""
    files: dict[str, Any] = {}
    total = sum(t.numel() * t.element_size() for t in leaves) + len(pickled or b"")
    fd = os.open(data, os.O_RDONLY)
    try:
        # Small dumps never touch tqdm: even a disabled bar takes tqdm's process-shared
        # lock, which a process killed mid-dump would leave held for its forked siblings.
        big = total >= _PROGRESS_BYTES
        with (
            tqdm(total=total, unit="B", unit_scale=True, desc="dump")
            if big
            else nullcontext() as bar
        ):
            for position, leaf in enumerate(leaves):
                files[leaf_name(position)] = write_tensor(fd, leaf_name(position), leaf)
                if bar is not None:
                    bar.update(files[leaf_name(position)]["nbytes"])
            if pickled is not None:
                files[OBJECTS] = write_file(fd, OBJECTS, pickled)
        fsync_dir(fd)
    finally:
        os.close(fd)
    return files


def write_dump(
    path: str | os.PathLike[str],
    manifest: dict[str, Any],
    state: dict[str, Any],
    objects: Any = None,
) -> Path:
    """Atomically write a dump at ``path``, replacing the dump there, if any.

    The dump is written and fsynced beside ``path``, then swapped into place in
    one atomic step, so a crash at any moment leaves either the previous or the
    new dump at ``path``, complete. Temporaries left beside ``path`` by killed
    dumps are removed first.

    Args:
        path: the dump's directory: absent, empty, or a previous dump.
        manifest: JSON-able summary (buffer dumps: ``components``, ``max_size``,
            ``length``, ``cursor``, ``write_count``, ``spec``).
        state: dicts, lists, tuples, None, bool, int, float, str and tensors.
        objects: the items of a list storage (None for other storages): JSON
            and tensors where they are plain values, tensors and TensorDicts,
            else pickled (then loading them needs ``allow_pickle=True``).

    Returns:
        The dump's path.

    Raises:
        TypeError: ``state`` holds another type, or ``manifest`` uses a reserved key.
        CheckpointError: ``path`` is something other than a dump or an empty directory.
        UntrustedPathError: ``path`` or its parent is owned or writable by another user
            (a parent writable by others is accepted if it has the sticky bit, as ``/tmp``).

    Examples:
        >>> import tempfile, torch
        >>> from rbdata.checkpoint import read_dump, write_dump
        >>> summary = {"max_size": 4, "length": 2, "cursor": 2, "write_count": 2}
        >>> state = {"storage": {"len": 2}, "writer": {"write_count": 2, "cursor": 2}}
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = write_dump(f"{tmp}/d", summary, state, objects=["a", torch.ones(2)])
        ...     manifest, loaded, objects = read_dump(f"{tmp}/d")
        >>> loaded["writer"], objects[0], objects[1].tolist()
        ({'write_count': 2, 'cursor': 2}, 'a', [1.0, 1.0])
    """
    target = Path(path)
    reserved = [k for k in manifest if k in RESERVED]
    if reserved:
        raise TypeError(f"write_dump: manifest keys {reserved} are reserved by the format.")
    _check_replaceable(target)
    leaves: list[torch.Tensor] = []
    try:
        state_node = encode(state, leaves, "state")
    except Unencodable as err:
        raise TypeError(
            f"write_dump: {err}; a state holds only dicts, lists, tuples, None, bool, int, "
            "float, str and tensors."
        ) from err
    objects_node, pickled = _encode_objects(objects, leaves)
    os.makedirs(target.parent, mode=0o700, exist_ok=True)
    check_trusted_dir(target.parent, "the dumps path's parent", sticky_ok=True)
    if target.is_dir():
        check_trusted_dir(target, "the dumps path")
    remove_temporaries(target)
    data = data_dir_name(new_id())
    tmp = target.parent / temporary_name(target.name)
    os.mkdir(tmp, 0o700)
    try:
        os.mkdir(tmp / data, 0o700)
        files = _write_data(tmp / data, leaves, pickled)
        body = {
            **manifest,
            "format_version": FORMAT_VERSION,
            "byteorder": BYTEORDER,
            "data": data,
            "files": files,
            "state": state_node,
            "objects": objects_node,
        }
        fd = os.open(tmp, os.O_RDONLY)
        try:
            write_file(fd, MANIFEST, json.dumps(body, indent=1).encode("utf-8"))
            fsync_dir(fd)
        finally:
            os.close(fd)
        swap_into_place(tmp, target, data)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
