"""Row memory reserved sparse, committed on write: private (:func:`reserve`) or shared segments.

A lazy storage sized for a whole run must not zero-fill its capacity at the
first write: :func:`reserve` maps anonymous memory with ``MAP_NORESERVE``
(pages committed when first written; Linux's heuristic overcommit does not
refuse a reservation larger than RAM plus swap). A reservation of
:data:`HUGE_PAGE_MIN` bytes or more asks for transparent huge pages
(``MADV_HUGEPAGE``, honoured where ``/sys/kernel/mm/transparent_hugepage/enabled``
is ``always`` or ``madvise``): a sampled batch reads rows scattered over the
whole buffer, and with 2 MiB pages their addresses stay in the TLB (a batch of
256 small rows out of a million is gathered about 10% faster). Memory is then
committed 2 MiB at a time, so a storage holds at most one partly written
huge page beyond its rows.

torch's own shared allocation commits every page at once, so a shared
buffer would cost its whole capacity from its first write. A segment here is
an anonymous ``memfd`` grown with ``ftruncate`` (sparse until written),
adopted by torch as a file-descriptor storage: ``torch.multiprocessing``
children receive it by handle as any shared tensor.
"""

from __future__ import annotations

import mmap
import os
import sys

import torch

from rbdata.errors import SharedMemoryFull

__all__ = ["HUGE_PAGE_MIN", "SharedMemoryFull", "check_space", "reserve", "reserve_shared"]

# Python 3.13 names it; the value is Linux's (other systems overcommit by default).
_MAP_NORESERVE: int = getattr(
    mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0
)
_MADV_HUGEPAGE: int | None = mmap.MADV_HUGEPAGE if sys.platform == "linux" else None
#: reservations of at least this many bytes ask for transparent huge pages
HUGE_PAGE_MIN = 64 << 20


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
    if nbytes >= HUGE_PAGE_MIN and _MADV_HUGEPAGE is not None:
        region.madvise(_MADV_HUGEPAGE)
    return torch.frombuffer(region, dtype=torch.uint8)  # the tensor keeps the mapping alive


def check_space(directory: str, nbytes: int) -> None:
    """Raise :class:`SharedMemoryFull` unless ``directory``'s file system has ``nbytes`` free.

    Rows in a file of shared memory (``/dev/shm``, a tmpfs) are committed as
    they are first written; a tmpfs that runs out then kills the writer with
    ``SIGBUS``. Checked before anything is written, the shortage is a Python
    error naming the bytes, the mount and the fix instead.

    Examples:
        >>> import tempfile
        >>> check_space(tempfile.gettempdir(), 1)
        >>> check_space(tempfile.gettempdir(), 1 << 62)
        Traceback (most recent call last):
        ...
        rbdata.errors.SharedMemoryFull: ...
    """
    try:
        stats = os.statvfs(directory)
    except (AttributeError, OSError):  # no statvfs (Windows): nothing to check
        return
    free = stats.f_bavail * stats.f_frsize
    if nbytes <= free:
        return
    mount = _mount_of(directory)
    raise SharedMemoryFull(
        f"a shared buffer needs {nbytes:,} bytes for its rows in {directory}, but the file "
        f"system mounted at {mount} has {free:,} bytes free (of "
        f"{stats.f_blocks * stats.f_frsize:,}). Make it larger (docker run --shm-size=..., "
        f"or mount -o remount,size=... {mount}), pass a smaller max_size, or give a "
        "LazyMemmapStorage a scratch_dir on a disk with room."
    )


def _mount_of(path: str) -> str:
    """The mount point holding ``path``."""
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def reserve_shared(nbytes: int) -> torch.Tensor:
    """As :func:`reserve`, in shared memory that ``torch.multiprocessing`` sends by handle.

    torch's own shared allocation commits every page at once (it
    ``fallocate`` call on its ``/dev/shm`` file), so a shared buffer would cost its
    whole capacity. Here the memory is an anonymous ``memfd`` grown with
    ``ftruncate`` (sparse until written), adopted by torch as a
    file-descriptor storage: children receive it by handle as any shared
    tensor (and an unrelated process opens it by the path
    ``/proc/<pid>/fd/<fd>``, see :mod:`.handle`). Under the ``file_system``
    sharing strategy, or without ``memfd``, torch allocates it.
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
