"""Raw files of a dump: tensors written from and read into their memory, checksummed.

Every function takes the file descriptor of the directory the file is in and
opens names relative to it without following symlinks, so nothing outside
that directory is ever read or written.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from typing import Any

import torch
import xxhash

from rbdata.errors import CheckpointError

CHUNK = 64 << 20  # bytes per write(): bounded, so huge tensors never hit a short-write limit
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
BYTEORDER = sys.byteorder  # raw files hold native bytes; the manifest says which order


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """A byte view of ``tensor``'s memory (``tensor`` on the CPU, contiguous)."""
    flat = tensor.reshape(-1)
    if flat.stride(0) != 1:  # a tensor of 0 or 1 items can be "contiguous" at stride 2
        flat = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)
    return flat.view(torch.uint8).numpy().data


def dtype_name(dtype: torch.dtype) -> str:
    """The name a manifest gives ``dtype`` (``"float32"``)."""
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: Any, where: str) -> torch.dtype:
    """The dtype a manifest names (CheckpointError for anything else)."""
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise CheckpointError(f"{where}: unknown dtype {name!r}.")
    return dtype


def checksum(data: memoryview | bytes) -> str:
    """The checksum a manifest records for ``data`` (xxh3, 64 bits, hex)."""
    return xxhash.xxh3_64_hexdigest(data)


def write_file(dir_fd: int, name: str, data: memoryview | bytes) -> dict[str, Any]:
    """Create ``name`` in ``dir_fd`` holding ``data``, fsync it; return its size and checksum."""
    view = memoryview(data).cast("B")
    hasher = xxhash.xxh3_64()
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=dir_fd)
    try:
        for start in range(0, len(view), CHUNK):
            chunk = view[start : start + CHUNK]
            hasher.update(chunk)
            while chunk:
                chunk = chunk[os.write(fd, chunk) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"nbytes": len(view), "xxh3_64": hasher.hexdigest()}


def write_tensor(dir_fd: int, name: str, tensor: torch.Tensor) -> dict[str, Any]:
    """Write ``tensor``'s bytes to ``name``; return its manifest entry."""
    data = tensor.detach().to("cpu").contiguous()
    entry = write_file(dir_fd, name, _bytes_of(data))
    return {"dtype": dtype_name(data.dtype), "shape": list(data.shape), **entry}


def fsync_dir(path: str | os.PathLike[str] | int) -> None:
    """Make the entries of a directory durable (a path or an open descriptor)."""
    fd = path if isinstance(path, int) else os.open(path, os.O_RDONLY | _NOFOLLOW)
    try:
        os.fsync(fd)
    except OSError as err:  # some file systems cannot fsync a directory
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        if not isinstance(path, int):
            os.close(fd)


def open_entry(dir_fd: int, name: str, where: str, *, directory: bool = False) -> int:
    """Open the regular file (or directory) ``name`` of ``dir_fd``; never through a symlink."""
    flags = (
        os.O_RDONLY
        | _NOFOLLOW
        | getattr(os, "O_NONBLOCK", 0)
        | (os.O_DIRECTORY if directory else 0)
    )
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError as err:
        raise CheckpointError(f"{where}: missing.") from err
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EMLINK) or _is_link(dir_fd, name):
            raise CheckpointError(f"{where}: is a symlink; a dump holds none.") from err
        kind = "a directory" if directory else "a regular file"
        raise CheckpointError(f"{where}: cannot be opened as {kind} ({err.strerror}).") from err
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)):
        os.close(fd)
        raise CheckpointError(f"{where}: is not a {'directory' if directory else 'regular file'}.")
    return fd


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_sized(dir_fd: int, name: str, nbytes: int, where: str) -> int:
    """Open ``name`` and check it holds ``nbytes`` bytes (before anything is allocated)."""
    fd = open_entry(dir_fd, name, where)
    size = os.fstat(fd).st_size
    if size != nbytes:
        os.close(fd)
        raise CheckpointError(f"{where}: holds {size} bytes, the manifest declares {nbytes}.")
    return fd


def _read_into(fd: int, view: memoryview, where: str) -> None:
    done = 0
    while done < len(view):
        n = os.readv(fd, [view[done : done + CHUNK]])
        if n == 0:
            raise CheckpointError(f"{where}: ended after {done} of {len(view)} bytes.")
        done += n


def _check_sum(view: memoryview, expected: str, where: str) -> None:
    if checksum(view) != expected:
        raise CheckpointError(f"{where}: checksum mismatch (the file is damaged).")


def read_tensor(dir_fd: int, name: str, entry: dict[str, Any], where: str) -> torch.Tensor:
    """Read the tensor file ``name`` described by a (checked) manifest ``entry``."""
    dtype = parse_dtype(entry["dtype"], where)
    fd = _open_sized(dir_fd, name, entry["nbytes"], where)
    try:
        try:
            out = torch.empty(entry["shape"], dtype=dtype)
        except (RuntimeError, ValueError, OverflowError) as err:
            raise CheckpointError(f"{where}: cannot hold shape {entry['shape']} ({err}).") from err
        view = _bytes_of(out)
        _read_into(fd, view, where)
    finally:
        os.close(fd)
    _check_sum(view, entry["xxh3_64"], where)
    if out.dtype == torch.bool and bool((out.view(torch.uint8) > 1).any()):
        raise CheckpointError(f"{where}: a bool tensor holds bytes other than 0 and 1.")
    return out


def read_bytes(dir_fd: int, name: str, entry: dict[str, Any], where: str) -> bytes:
    """Read the file ``name`` described by a (checked) manifest ``entry``."""
    fd = _open_sized(dir_fd, name, entry["nbytes"], where)
    try:
        out = bytearray(entry["nbytes"])
        _read_into(fd, memoryview(out), where)
    finally:
        os.close(fd)
    _check_sum(memoryview(out), entry["xxh3_64"], where)
    return bytes(out)
