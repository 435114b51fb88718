"""Row memory that costs what is written: address space reserved, pages committed on first write.

A lazy storage sized for a whole run (a million Atari frames, 26 GiB) must not
zero-fill its capacity at the first write, nor be refused because its plain
size exceeds the machine's memory. :func:`reserve` maps anonymous memory with
``MAP_NORESERVE``: the kernel hands out zero pages and commits a page only
when it is first written, and Linux's heuristic overcommit does not refuse a
reservation larger than RAM plus swap (a plain ``malloc``/``torch.empty`` of
that size is refused). Unwritten rows read as zeros, as a zero-filled tensor's
would. :func:`reserve_shared` does the same in shared memory (a file in
``memfd`` grown with ``ftruncate``, sparse until written), for storages
sent to ``torch.multiprocessing`` children.

:func:`resident_bytes` asks the kernel (``mincore``) how much of a span is in
memory, for ``stats()``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
from typing import Any

import torch

_PAGE = mmap.PAGESIZE
# Python 3.13 names it; the value is Linux's (other systems overcommit by default).
_MAP_NORESERVE: int = getattr(
    mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0
)
_CHUNK_PAGES = 1 << 18  # mincore looks at 1 GiB of address space per call


def reserve(nbytes: int) -> torch.Tensor:
    """A ``uint8`` tensor of ``nbytes`` zeros whose pages are committed when first written.

    Args:
        nbytes: size in bytes.

    Returns:
        A 1-D CPU tensor over an anonymous private mapping (a plain
        ``torch.zeros`` on systems without ``mmap`` flags, i.e. Windows).
    """
    if nbytes == 0 or not hasattr(mmap, "MAP_PRIVATE"):
        return torch.zeros(nbytes, dtype=torch.uint8)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | _MAP_NORESERVE)
    return torch.frombuffer(region, dtype=torch.uint8)  # the tensor keeps the mapping alive


def reserve_shared(nbytes: int) -> torch.Tensor:
    """As :func:`reserve`, in shared memory that ``torch.multiprocessing`` sends by handle.

    torch's own shared allocation commits every page at once (it
    ``fallocate`` call on its ``/dev/shm`` file), so a shared buffer would cost its
    whole capacity. Here the memory is an anonymous ``memfd`` grown with
    ``ftruncate`` (sparse until written), adopted by torch as a
    file-descriptor storage: children receive it by handle as any shared
    tensor. Under the ``file_system`` sharing strategy (memory named in
    ``/dev/shm``, see ``shared_handle.named_sharing``), or without ``memfd``,
    torch allocates it.
    """
    memfd = getattr(os, "memfd_create", None)
    strategy = torch.multiprocessing.get_sharing_strategy()  # type: ignore[no-untyped-call]
    if memfd is None or strategy != "file_descriptor" or nbytes == 0:
        storage = torch.UntypedStorage._new_shared(nbytes)  # type: ignore[no-untyped-call]
        return torch.empty(0, dtype=torch.uint8).set_(storage)
    fd = memfd("rbdata-rows", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, nbytes)
        # torch maps the descriptor and keeps its own duplicate (untyped helper)
        storage = torch.UntypedStorage._new_shared_fd_cpu(fd, nbytes)  # type: ignore[attr-defined]
    finally:
        os.close(fd)
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def resident_bytes(tensor: torch.Tensor, nbytes: int) -> int:
    """Bytes of the first ``nbytes`` of ``tensor``'s memory that are resident (in RAM).

    Args:
        tensor: a contiguous CPU tensor.
        nbytes: the span to look at, from ``tensor.data_ptr()``.

    Returns:
        The resident bytes (whole pages, capped at ``nbytes``); ``nbytes`` itself
        where the kernel cannot tell (no ``mincore``).
    """
    if nbytes <= 0:
        return 0
    mincore = _mincore()
    if mincore is None:
        return nbytes
    start = tensor.data_ptr()
    first = start - start % _PAGE
    pages = -(-(start + nbytes - first) // _PAGE)
    resident = 0
    vec = (ctypes.c_ubyte * min(pages, _CHUNK_PAGES))()
    done = 0
    while done < pages:
        count = min(pages - done, _CHUNK_PAGES)
        if mincore(ctypes.c_void_p(first + done * _PAGE), count * _PAGE, vec) != 0:
            return nbytes
        flags = torch.frombuffer(vec, dtype=torch.uint8, count=count)
        resident += int(flags.bitwise_and(1).sum())
        done += count
    return min(resident * _PAGE, nbytes)


def row_memory(packed: torch.Tensor, filled_rows: int) -> dict[str, int]:
    """``capacity_bytes`` of ``packed`` rows and ``resident_bytes`` of its first ``filled_rows``."""
    capacity = packed.numel()
    if packed.device.type != "cpu":  # device memory is committed whole
        return {"capacity_bytes": capacity, "resident_bytes": capacity}
    used = filled_rows * packed.shape[1]
    return {"capacity_bytes": capacity, "resident_bytes": resident_bytes(packed, used)}


def compact(packed: torch.Tensor, filled_rows: int) -> Any:
    """``packed`` for a pickle: shared or device rows as they are, else the filled rows only.

    A copy (``pickle``, ``deepcopy``, a queue) then costs what the storage holds;
    :func:`expand` reserves the rest of the capacity again.
    """
    if packed.device.type != "cpu" or packed.is_shared():
        return packed
    return (packed.shape[0], packed[:filled_rows].clone())


def expand(obj: Any) -> torch.Tensor:
    """The rows :func:`compact` gave, with the capacity reserved again."""
    if isinstance(obj, torch.Tensor):
        return obj
    rows, filled = obj
    packed = reserve(rows * filled.shape[1]).view(rows, filled.shape[1])
    packed[: filled.shape[0]].copy_(filled)
    return packed


_MINCORE: list[Any] = []


def _mincore() -> Any:
    """The C library's ``mincore``, or None where it is missing."""
    if not _MINCORE:
        function = None
        if sys.platform != "win32":
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
                function = libc.mincore
                function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
                function.restype = ctypes.c_int
            except (OSError, AttributeError):
                function = None
        _MINCORE.append(function)
    return _MINCORE[0]
