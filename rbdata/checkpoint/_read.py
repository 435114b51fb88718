"""Reading a dump while trusting nothing in it.

Only what the manifest names is opened, relative to the dump's own directory
descriptors and never through a symlink; sizes are checked before memory is
allocated, checksums before anything is decoded, and the summary against the
data before the caller gets it. Tensors are raw bytes: nothing is unpickled
unless the caller allows it for the objects of a list storage.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import torch

from rbdata.errors import CheckpointError

from ._consistency import check_consistency
from ._dump_paths import MANIFEST, MAX_MANIFEST_BYTES, OBJECTS, is_data_dir_name, leaf_name
from ._files import open_entry, read_bytes, read_tensor
from ._manifest import parse_manifest
from ._state_tree import decode

_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


_PICKLED = {"$pickle": OBJECTS}  # the objects node of a dump whose objects are pickled


def _decode(node: Any, tensor: Any, where: str) -> Any:
    try:
        return decode(node, tensor, where)
    except RecursionError as err:
        raise CheckpointError(f"{where}: nested too deeply.") from err


class Pickles(Enum):
    """What to do with the pickled objects of a list storage."""

    REFUSE = "refuse"  # raise: unpickling runs code from the file
    CHECK = "check"  # checksum them, do not unpickle (verification)
    LOAD = "load"  # checksum, then unpickle (the caller trusts the file)


@dataclass(frozen=True)
class Dump:
    """What a checked dump holds."""

    manifest: dict[str, Any]
    state: dict[str, Any]
    objects: Any  # None: no objects, or pickled ones left unpickled (``pickled`` tells)
    pickled: bool
    files: int
    nbytes: int


def _open_root(root: Path) -> int:
    try:
        return os.open(root, _DIRECTORY)
    except FileNotFoundError as err:
        raise CheckpointError(
            f"no replay-buffer dump at {str(root)!r}: directory not found."
        ) from err
    except NotADirectoryError as err:
        raise CheckpointError(f"{root}: is not a directory (a dump is a directory).") from err
    except OSError as err:
        raise CheckpointError(f"{root}: cannot be opened ({err.strerror}).") from err


def _read_manifest(root_fd: int, root: Path, names: list[str]) -> dict[str, Any]:
    where = str(root / MANIFEST)
    if MANIFEST not in names:
        raise CheckpointError(
            f"{where}: missing, so {str(root)!r} is not a complete replay-buffer dump "
            "(the dump was interrupted or the directory is something else)."
        )
    fd = open_entry(root_fd, MANIFEST, where)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_MANIFEST_BYTES:
            raise CheckpointError(f"{where}: {size} bytes, more than a manifest can be.")
        raw = b""
        while len(raw) < size and (chunk := os.read(fd, size - len(raw))):
            raw += chunk
    finally:
        os.close(fd)
    return parse_manifest(raw, where)


def _check_top_level(root: Path, names: list[str], live: str) -> None:
    for name in names:
        if name in (MANIFEST, live) or is_data_dir_name(name):
            continue  # another data-<id>: left by an interrupted in-place dump, never read
        raise CheckpointError(
            f"{root / name}: unexpected entry; a dump holds only {MANIFEST} and data directories."
        )
    if live not in names:
        raise CheckpointError(f"{root / live}: missing (the manifest names it as the data).")


class _DataReader:
    """Reads the files of a data directory, each at most once, as the state tree asks."""

    def __init__(self, data_fd: int, data: Path, files: dict[str, Any]) -> None:
        self.data_fd, self.data, self.files = data_fd, data, files
        self.used: set[str] = set()
        listed = sorted(os.listdir(data_fd))
        extra = [n for n in listed if n not in files]
        missing = [n for n in files if n not in listed]
        if extra:
            raise CheckpointError(f"{data / extra[0]}: not named by the manifest.")
        if missing:
            raise CheckpointError(f"{data / missing[0]}: named by the manifest, missing.")

    def _claim(self, name: str, where: str) -> dict[str, Any]:
        if name not in self.files or name in self.used:
            problem = "is used twice" if name in self.used else "names no file of the manifest"
            raise CheckpointError(f"{where}: reference to {name!r} {problem}.")
        self.used.add(name)
        entry: dict[str, Any] = self.files[name]
        return entry

    def tensor(self, ref: Any, where: str) -> torch.Tensor:
        if type(ref) is not int or ref < 0:
            raise CheckpointError(f"{where}: $tensor must name a file by its number, got {ref!r}.")
        name = leaf_name(ref)
        entry = self._claim(name, where)
        if "dtype" not in entry:
            raise CheckpointError(f"{where}: {name!r} is not a tensor file.")
        return read_tensor(self.data_fd, name, entry, str(self.data / name))

    def refuse_pickle(self, node: Any) -> None:
        """Raise if ``node`` is pickled objects (before any file is read)."""
        if node == _PICKLED:
            raise CheckpointError(
                f"{self.data / OBJECTS}: holds pickled Python objects, and unpickling runs code "
                "from the file; load it with allow_pickle=True, into a buffer with a list "
                "storage, only if you trust it."
            )

    def objects(self, node: Any, storage: Any, unpickle: bool, where: str) -> tuple[Any, bool]:
        """The objects ``node`` describes and whether they were pickled (None: not unpickled).

        Pickled objects are read only for a list storage (a ``storage`` state without content).
        """
        if node != _PICKLED:
            return _decode(node, self.tensor, where), False
        path = self.data / OBJECTS
        if "content" in storage:
            raise CheckpointError(f"{path}: pickled objects in a tensor storage's dump; not read.")
        raw = read_bytes(self.data_fd, OBJECTS, self._claim(OBJECTS, where), str(path))
        if not unpickle:
            return None, True
        try:
            return pickle.loads(raw), True  # noqa: S301 - the caller trusts this file
        except Exception as err:  # unpickling fails in any way a damaged file makes it
            raise CheckpointError(f"{path}: cannot be unpickled ({err!r}).") from err

    def unused(self) -> list[str]:
        return [n for n in self.files if n not in self.used]


def open_dump(path: str | os.PathLike[str], pickles: Pickles) -> Dump:
    """Read and check the dump at ``path`` (see the module docstring).

    Raises:
        CheckpointError: naming the file and the problem; nothing else.
    """
    root = Path(path)
    root_fd = _open_root(root)
    try:
        names = os.listdir(root_fd)
        manifest = _read_manifest(root_fd, root, names)
        where = str(root / MANIFEST)
        _check_top_level(root, names, manifest["data"])
        data = root / manifest["data"]
        data_fd = open_entry(root_fd, manifest["data"], str(data), directory=True)
        try:
            reader = _DataReader(data_fd, data, manifest["files"])
            if pickles is Pickles.REFUSE:
                reader.refuse_pickle(manifest.get("objects"))
            state = _decode(manifest.get("state"), reader.tensor, f"{where}: state")
            storage = None
            if isinstance(state, dict):
                storage = state.get("_storage", state.get("storage"))
            objects, pickled = reader.objects(
                manifest.get("objects"),
                storage if isinstance(storage, dict) else {},
                pickles is Pickles.LOAD,
                f"{where}: objects",
            )
            check_consistency(manifest, state, objects, where)
            if reader.unused():
                raise CheckpointError(f"{data / reader.unused()[0]}: not used by any entry.")
        finally:
            os.close(data_fd)
    finally:
        os.close(root_fd)
    sizes = [entry["nbytes"] for entry in manifest["files"].values()]
    return Dump(manifest, state, objects, pickled, len(sizes), sum(sizes))
