"""A shared object handed to another process of this user by passing its file descriptors.

:mod:`.handle` hands a buffer over by *names* (files in ``/dev/shm``), which
needs memory shared under torch's ``file_system`` strategy from the start:
memory already shared by file descriptor (``share()``, ``shared=True``,
``shared_init=True``: torch's default strategy) would be moved to a named
file, and every view of the old mapping, and every process that mapped it,
would lose it. This module hands the *descriptors* over instead, as
``multiprocessing`` does for a child it starts: the object is pickled as for
a spawned child, each descriptor registered with the sender's
``multiprocessing`` resource sharer (a thread serving it once over a Unix
socket), and the receiver fetches them while unpickling, authenticated by
the sender's ``authkey``. Any process of the user given the bytes and the
key maps the same memory as the sender; nothing is copied.

Each dump's descriptors are served once: dump again for every receiver.
The sender must run until the receiver loaded the dump.
"""

from __future__ import annotations

import pickle
import threading
from multiprocessing import current_process, resource_sharer
from multiprocessing.reduction import ForkingPickler
from typing import Any

from rbdata.sharing.handle import pickled_while_spawning

__all__ = ["dump_with_fds", "load_with_fds", "sender_key"]

#: one load at a time (the process's authkey is switched to the sender's meanwhile)
_LOADING = threading.Lock()


class _HandingOver:
    """Stands for a child being started: descriptors go through the resource sharer."""

    @staticmethod
    def duplicate_for_child(fd: int) -> int:
        return fd

    @staticmethod
    def DupFd(fd: int) -> Any:  # noqa: N802 - the name multiprocessing's Popen objects use
        return resource_sharer.DupFd(fd)


def sender_key() -> bytes:
    """This process's ``multiprocessing`` authkey: what a receiver of its dumps needs."""
    return bytes(current_process().authkey)


def dump_with_fds(obj: Any) -> bytes:
    """``obj`` pickled for another process of this user: shared memory by descriptor.

    What pickles differently for a child being started (locks, shared
    storages) pickles as it would for one; descriptors are served by this
    process's resource sharer, once each.

    Examples:
        >>> import torch
        >>> data = dump_with_fds(torch.zeros(3).share_memory_())
        >>> load_with_fds(data, sender_key())  # here the sender is this process
        tensor([0., 0., 0.])
    """
    return pickled_while_spawning(obj, _HandingOver(), ForkingPickler)


def load_with_fds(data: bytes, key: bytes) -> Any:
    """Load :func:`dump_with_fds`'s bytes, fetching descriptors from the sender with ``key``.

    Args:
        data: the dump (from a process of this user, over an authenticated channel).
        key: the sender's :func:`sender_key`.

    Raises:
        TypeError: if ``data`` or ``key`` is not bytes.
    """
    if not isinstance(data, bytes) or not isinstance(key, bytes):
        raise TypeError(
            f"data and key must be bytes, got {type(data).__name__} and {type(key).__name__}."
        )
    process = current_process()
    with _LOADING:
        own = process.authkey
        process.authkey = key
        try:
            return pickle.loads(data)
        finally:
            process.authkey = own
