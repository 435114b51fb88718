"""Ray itself: importing it, connecting to a cluster, and turning its errors into ours."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from rbdata.errors import ServiceUnavailableError

NAMESPACE = "rbdata"


def ray_module() -> ModuleType:
    """``import ray``, or an ImportError naming the ``ray`` extra."""
    try:
        return importlib.import_module("ray")
    except ImportError as err:
        raise ImportError(
            f"the Ray service backend needs the 'ray' extra: pip install 'rbdata[ray]' ({err})."
        ) from err


class _SharedRay:
    """The Ray instance a lease of this process started, and the leases holding it."""

    def __init__(self) -> None:
        self.holders = 0  # leases alive that share the Ray instance some lease started
        self.started = False


_SHARED = _SharedRay()


class Lease:
    """This process's use of Ray on behalf of one Ray-backed buffer.

    Ray is started (``ray.init(**init_config)``) by the first lease when this
    process is not attached to a cluster yet, and shut down when the last of
    the leases that started it is released; Ray started by the user is left
    running.
    """

    def __init__(self, init_config: dict[str, Any] | None) -> None:
        ray = ray_module()
        if not ray.is_initialized():
            ray.init(**(init_config or {}))
            _SHARED.started = True
        self._shares = _SHARED.started
        if self._shares:
            _SHARED.holders += 1
        self._released = False

    def release(self) -> None:
        """Give the lease back (idempotent); the last one shuts down the Ray it started."""
        if self._released:
            return
        self._released = True
        if not self._shares:
            return
        _SHARED.holders -= 1
        if _SHARED.holders == 0:
            _SHARED.started = False
            ray = ray_module()
            if ray.is_initialized():
                ray.shutdown()


def join(address: str) -> None:
    """Attach this process to the cluster at ``address`` if it is not attached to one."""
    ray = ray_module()
    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)


def get(refs: Any, what: str, timeout: float | None = None) -> Any:
    """``ray.get(refs)`` with the actor's exceptions re-raised as they were raised there.

    An exception raised inside the actor reaches the caller with its own type
    and message (the remote traceback is attached as a note); a dead actor
    raises :class:`ServiceUnavailableError` naming ``what``.
    """
    ray = ray_module()
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.RayTaskError as err:
        cause = err.cause
        if not isinstance(cause, BaseException) or isinstance(cause, ray.exceptions.RayError):
            raise
        if sys.version_info >= (3, 11):  # BaseException.add_note
            cause.add_note(f"raised in the replay buffer's Ray actor:\n{err}")
        raise cause from None
    except ray.exceptions.RayActorError as err:
        raise ServiceUnavailableError(
            f"{what}: the Ray actor hosting the replay buffer is no longer alive (it was shut "
            "down, or its process died); build a new Ray-backed buffer and use its client()."
        ) from err
