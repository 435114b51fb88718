"""A client's map of the buffer its actor hosts, when both run on one node.

See :mod:`rbdata.service.server.direct` for the design. :class:`DirectMap` asks
the actor for the map once (again after the storage got its first rows, or
after the owner moved the epoch), then runs ``add``/``extend`` (and, when the
handle allows it, ``sample`` and ``len``) on it, under the owner's lock. A
wait for that lock checks the owner process every quarter second and raises
:class:`~rbdata.errors.ServiceUnavailableError` once it is gone; a call that
finds the owner gone before it starts raises the same error.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import time
from collections.abc import Callable
from typing import Any

import torch

from rbdata.errors import ServiceUnavailableError
from rbdata.service import runtime
from rbdata.service.server.direct import DirectHandle
from rbdata.sharing.handle import import_shared

__all__ = ["DIRECT_WRITES", "DirectMap"]

_log = logging.getLogger(__name__)

_RETRY_S = 0.05  # a buffer not mappable yet (empty storage) is asked again this often at most

#: The calls a client runs on its map.
DIRECT_WRITES = frozenset({"add", "extend"})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that id: alive
        return True
    return True


class DirectMap:
    """This process's map of the hosted buffer (see the module docstring).

    Args:
        fetch: asks the actor for its handle (``BufferOwner.direct_handle``), or None
            when this process is not on the actor's node.

    Examples:
        >>> from rbdata.service.client.direct import DirectMap
        >>> DirectMap(None).buffer() is None  # not on the actor's node
        True
    """

    def __init__(self, fetch: Callable[[], tuple[bytes | None, bool]] | None) -> None:
        self._fetch = fetch
        self._map: Any = None
        self._handle: DirectHandle | None = None
        self._next_try = 0.0

    def buffer(self) -> Any:
        """The map, fetched if need be and still current (None: use the actor)."""
        if self._current():
            return self._map
        self._map = self._handle = None
        if self._fetch is None or time.monotonic() < self._next_try:
            return None
        data, retry = self._fetch()
        self._next_try = time.monotonic() + _RETRY_S
        if not retry:
            self._fetch = None  # this buffer is never mapped: stop asking
        if data is None:
            return None
        try:
            handle = pickle.loads(data)
            pid = handle.pid
            buffer = import_shared(handle.buffer, lambda: _alive(pid), lambda: self._dead(pid))
        except OSError as err:  # the owner's memory cannot be opened from here: use the actor
            _log.warning("cannot map the hosted buffer, calling its actor instead: %s", err)
            self._fetch = None
            return None
        if buffer.generator is not None:  # a copy of the owner's generator would repeat its draws
            buffer.set_rng(torch.Generator().manual_seed(random.getrandbits(63)))
        self._map, self._handle = buffer, handle
        _log.debug("writing to the buffer of process %d through shared memory", pid)
        return buffer

    def run(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], read: bool = False
    ) -> tuple[bool, Any]:
        """``(True, buffer.<name>(...))`` on the map, or ``(False, None)`` without one.

        Args:
            name: the buffer method.
            args: its positional arguments.
            kwargs: its keyword arguments.
            read: it samples (run only when the handle allows sampling from the map).

        A write checks the epoch again under the owner's lock, so it never
        lands in memory the owner replaced meanwhile (it then fetches anew).
        A read takes no lock: the owner moves the epoch before a whole-buffer
        call starts, so a read after which the epoch has not moved overlapped
        none (rows written meanwhile are the buffer's own concern: its reads
        are lock-free across processes). A read the epoch moved under is
        dropped and made again.
        """
        for _ in range(2):
            buffer = self.buffer()
            if buffer is None or (read and not self._handle.reads):  # type: ignore[union-attr]
                return False, None
            self._check_alive()
            if read:
                out = getattr(buffer, name)(*args, **kwargs)
                if self._current():
                    return True, out
                continue
            with buffer.lock:
                if self._current():
                    return True, getattr(buffer, name)(*args, **kwargs)
        return False, None

    def _current(self) -> bool:
        handle = self._handle
        return handle is not None and handle.epoch[0] == handle.at

    def _check_alive(self) -> None:
        handle = self._handle
        if handle is not None and not _alive(handle.pid):
            raise self._dead(handle.pid)

    def _dead(self, pid: int) -> ServiceUnavailableError:
        self._map = self._handle = None
        self._fetch = None
        return ServiceUnavailableError(
            f"the Ray actor hosting the replay buffer (process {pid}) is no longer alive: the "
            "buffer this client mapped through shared memory went with it; build a new "
            "Ray-backed buffer."
        )

    def forget(self) -> None:
        """Drop the map (the client is being pickled or closed)."""
        self._map = self._handle = None


def fetcher(
    actor: Any, here: str, there: str | None
) -> Callable[[], tuple[bytes | None, bool]] | None:
    """The call asking ``actor`` for its handle, if this node ``here`` is its node ``there``.

    ``there`` is None when the service maps nothing (``same_node_maps=False``).
    """
    if here != there:
        return None
    return lambda: tuple(runtime.get(actor.direct_handle.remote(), "direct_handle"))
