"""Putting a fully written dump in place of the previous one, atomically.

Where the OS offers it (Linux ``renameat2(RENAME_EXCHANGE)``), the new dump's
directory and the old one trade places in one step. Elsewhere (or on a file
system that refuses the exchange), the new data directory is moved into the
old dump and its ``manifest.json``, which names the live data directory, is
replaced last (``rename`` of a file is atomic everywhere). At every moment
``path`` holds a complete dump: the old one until the single atomic step, the
new one after it.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from ._dump_paths import MANIFEST, is_temporary_of
from ._files import fsync_dir

logger = logging.getLogger(__name__)

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP)


def _renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        func = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # a libc older than glibc 2.28
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_RENAMEAT2 = _renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap the directories ``a`` and ``b`` atomically; False where the OS cannot."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def swap_into_place(new: Path, target: Path, data_dir: str) -> None:
    """Make the complete dump ``new`` the dump at ``target``; ``new`` is gone afterwards.

    Args:
        new: the fully written and fsynced dump, beside ``target``.
        target: the dump's path; absent, an empty directory or a previous dump.
        data_dir: the name of ``new``'s data directory.
    """
    parent = target.parent
    if not target.exists():
        os.rename(new, target)
    elif exchange(new, target):
        fsync_dir(parent)
        shutil.rmtree(new)
    else:
        _replace_manifest(new, target, data_dir)
    fsync_dir(parent)


def _replace_manifest(new: Path, target: Path, data_dir: str) -> None:
    """The in-place swap: move the data in, replace the manifest, remove what it superseded."""
    logger.debug("no exchange rename for %s: replacing its manifest in place", target)
    os.rename(new / data_dir, target / data_dir)
    fsync_dir(target)
    os.rename(new / MANIFEST, target / MANIFEST)  # the one step that switches versions
    fsync_dir(target)
    os.rmdir(new)
    remove_superseded(target, keep=data_dir)


def remove_superseded(target: Path, keep: str) -> None:
    """Remove everything in the dump ``target`` but its manifest and the data directory ``keep``."""
    for entry in os.scandir(target):
        if entry.name in (MANIFEST, keep):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def remove_temporaries(target: Path) -> None:
    """Remove what killed dumps of ``target`` left beside it."""
    if not target.parent.is_dir():
        return
    for entry in os.scandir(target.parent):
        if not is_temporary_of(entry.name, target.name):
            continue
        logger.info("removing %s, left by an interrupted dump", entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)
