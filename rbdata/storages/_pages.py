"""Row memory that costs what is written: address space reserved, pages committed on first write.

A lazy storage sized for a whole run (a million Atari frames, 26 GiB) must not
zero-fill its capacity at the first write, nor be refused because its plain
size exceeds the machine's memory. :func:`rbdata.sharing.segments.reserve` maps
anonymous memory with ``MAP_NORESERVE``: the kernel hands out zero pages and commits a page only
when it is first written, and Linux's heuristic overcommit does not refuse a
reservation larger than RAM plus swap (a plain ``malloc``/``torch.empty`` of
that size is refused). Unwritten rows read as zeros, as a zero-filled tensor's
would. Shared rows are reserved the same way (:mod:`rbdata.sharing.segments`).

:func:`resident_bytes` asks the kernel (``mincore``) how much of a span is in
memory, for ``stats()``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys
from typing import Any

import torch

from rbdata.sharing.segments import reserve

_PAGE = mmap.PAGESIZE
_CHUNK_PAGES = 1 << 18  # mincore looks at 1 GiB of address space per call


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
